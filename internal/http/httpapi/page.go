package httpapi

import (
	"context"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/tetherhq/tether/internal/sandbox"
)

// parseAfter reads the event position from after or cursor (they are the
// same: the id of the last event seen).
func parseAfter(c *gin.Context) (int64, error) {
	v, ok := c.GetQuery("after")
	if cur, has := c.GetQuery("cursor"); has {
		if ok && cur != v {
			return 0, sandbox.Errorf(sandbox.CodeInvalidRequest, "after and cursor disagree; pass one")
		}
		v, ok = cur, true
	}
	if !ok {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, sandbox.Errorf(sandbox.CodeInvalidRequest, "after/cursor must be an event id (a non-negative integer)")
	}
	return n, nil
}

// ParseEventPage reads an event page's position and size from the query,
// refusing any other parameter.
func ParseEventPage(c *gin.Context) (after int64, limit int, err error) {
	if err := OnlyQuery(c, "after", "limit", "cursor"); err != nil {
		return 0, 0, err
	}
	if limit, err = ParseLimit(c); err != nil {
		return 0, 0, err
	}
	after, err = parseAfter(c)
	return after, limit, err
}

// SandboxPage reads a page of a sandbox's records (its events, its
// activity) with read, once it checked the sandbox is the tenant's, and
// returns them with the page size asked for.
func SandboxPage[T any](c *gin.Context, st SandboxGetter, read func(ctx context.Context, id string, after int64, limit int) ([]T, error)) ([]T, int, error) {
	id, err := SandboxID(c)
	if err != nil {
		return nil, 0, err
	}
	after, limit, err := ParseEventPage(c)
	if err != nil {
		return nil, 0, err
	}
	if _, err := st.GetSandbox(c.Request.Context(), TenantOf(c), id); err != nil {
		return nil, 0, NotFoundAs(err, id)
	}
	items, err := read(c.Request.Context(), id, after, limit)
	return items, limit, err
}
