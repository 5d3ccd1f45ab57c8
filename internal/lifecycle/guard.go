package lifecycle

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"

	"github.com/tetherhq/tether/internal/domain"
)

// ErrProviderPanicked marks the error of a provider call that panicked.
var ErrProviderPanicked = errors.New("provider call panicked")

// callProvider runs one provider call. A panic in it does not take the
// process down: it is logged with its stack, counted (count, if set) and
// returned as a retryable error, so the work is tried again like any
// transient failure.
func callProvider[T any](log *slog.Logger, provider, op string, count func(), fn func() (T, error)) (res T, err error) {
	defer func() {
		if r := recover(); r != nil {
			log.Error("provider call panicked", "provider", provider, "op", op, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			if count != nil {
				count()
			}
			var zero T
			res, err = zero, domain.Retryable(fmt.Errorf("%w: %s %s: %v", ErrProviderPanicked, provider, op, r))
		}
	}()
	return fn()
}
