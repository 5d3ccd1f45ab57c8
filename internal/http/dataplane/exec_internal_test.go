package dataplane

import (
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/http/httpapi"
)

// TestExecTimeout: absent is the default, 0 the server's maximum, anything
// else as asked within the maximum.
func TestExecTimeout(t *testing.T) {
	t.Parallel()
	n := func(v int64) *int64 { return &v }
	for _, tc := range []struct {
		asked *int64
		max   time.Duration
		want  time.Duration
		bad   bool
	}{
		{nil, time.Hour, httpapi.DefaultExecTimeout, false},
		{nil, 10 * time.Second, 10 * time.Second, false}, // a maximum below the default wins
		{n(0), time.Hour, time.Hour, false},
		{n(1), time.Hour, time.Second, false},
		{n(3600), time.Hour, time.Hour, false},
		{n(3601), time.Hour, 0, true},
		{n(-1), time.Hour, 0, true},
	} {
		got, err := execTimeout(tc.asked, tc.max)
		if tc.bad {
			if domain.ErrorCode(err) != domain.CodeInvalidRequest {
				t.Errorf("execTimeout(%v, %s) = %s, %v; want INVALID_REQUEST", tc.asked, tc.max, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("execTimeout(%v, %s) = %s, %v; want %s", tc.asked, tc.max, got, err, tc.want)
		}
	}
}
