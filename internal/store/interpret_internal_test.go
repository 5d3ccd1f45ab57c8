package store

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tetherhq/tether/internal/domain"
)

// TestRolledBackIsUnavailable: a transaction Postgres rolled back to be
// run again (a deadlock, a serialization failure, an idle transaction
// ended) is worth a retry, not an internal error; another error is not.
func TestRolledBackIsUnavailable(t *testing.T) {
	for _, code := range []string{"40P01", "40001", "25P03"} {
		if err := interpret(&pgconn.PgError{Code: code}); !errors.Is(err, domain.ErrUnavailable) {
			t.Errorf("interpret(%s) = %v, want ErrUnavailable", code, err)
		}
	}
	if err := interpret(&pgconn.PgError{Code: "23505"}); errors.Is(err, domain.ErrUnavailable) {
		t.Errorf("interpret(23505) = %v, want it as it is", err)
	}
}
