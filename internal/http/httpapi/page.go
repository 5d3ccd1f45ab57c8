package httpapi

import (
	"context"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/tetherhq/tether/internal/domain"
)

// parseAfter reads the event position from after or cursor (they are the
// same: the id of the last event seen).
func parseAfter(c *gin.Context) (int64, error) {
	v, ok := c.GetQuery("after")
	if cur, has := c.GetQuery("cursor"); has {
		if ok && cur != v {
			return 0, domain.Errorf(domain.CodeInvalidRequest, "after and cursor disagree; pass one")
		}
		v, ok = cur, true
	}
	if !ok {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, domain.Errorf(domain.CodeInvalidRequest, "after/cursor must be an event id (a non-negative integer)")
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

// FormatStreamPosition writes an event stream position as the stream's SSE
// event id, "<transaction>-<event id>" (webhooks spell their cursors the
// same way).
func FormatStreamPosition(p domain.StreamPosition) string {
	return strconv.FormatUint(p.Tx, 10) + "-" + strconv.FormatInt(p.ID, 10)
}

// ParseStreamPosition reads a position FormatStreamPosition wrote.
func ParseStreamPosition(s string) (domain.StreamPosition, error) {
	tx, id, ok := strings.Cut(s, "-")
	p := domain.StreamPosition{}
	var err1, err2 error
	p.Tx, err1 = strconv.ParseUint(tx, 10, 64)
	p.ID, err2 = strconv.ParseInt(id, 10, 64)
	if !ok || err1 != nil || err2 != nil || p.ID < 0 {
		return p, domain.Errorf(domain.CodeInvalidRequest, "a stream position is the id of an event the stream sent (Last-Event-ID or cursor), such as 1234-56")
	}
	return p, nil
}
