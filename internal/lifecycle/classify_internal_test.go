package lifecycle

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/domain"
)

// TestClassifyCreate is the table of what a finished create call leads to,
// without a database or a provider.
func TestClassifyCreate(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	boom := errors.New("boom")
	transient := domain.Retryable(errors.New("try again"))
	base := createCall{attempts: 1, maxAttempts: 5, retryAt: now.Add(time.Second), deadline: now.Add(time.Minute)}
	with := func(f func(*createCall)) createCall {
		c := base
		f(&c)
		return c
	}
	cases := []struct {
		name string
		call createCall
		want createOutcome
		msg  string
	}{
		{"success", base, createReady, ""},
		// Success wins over everything: the resource exists and the
		// fenced write decides whether it is still wanted.
		{"success while stopping", with(func(c *createCall) { c.stopping = true }), createReady, ""},
		{"ended meanwhile", with(func(c *createCall) { c.err, c.cause = boom, errSandboxEnded }), createCancelled, ""},
		{"lease lost", with(func(c *createCall) { c.err, c.cause = boom, errLeaseLost }), createLeaseLost, ""},
		{"ended while stopping", with(func(c *createCall) { c.err, c.cause, c.stopping = boom, errSandboxEnded, true }), createCancelled, ""},
		{"stopping", with(func(c *createCall) { c.err, c.stopping = boom, true }), createHandBack, ""},
		{"deadline", with(func(c *createCall) { c.err, c.deadlinePassed = boom, true }), createFailed, "creation deadline passed: boom"},
		{"transient", with(func(c *createCall) { c.err = transient }), createRetry, ""},
		{"transient, wrapped", with(func(c *createCall) { c.err = fmt.Errorf("sim: %w", transient) }), createRetry, ""},
		{"transient, last attempt", with(func(c *createCall) { c.err, c.attempts = transient, 5 }), createFailed, "try again"},
		{"transient, retry past the deadline", with(func(c *createCall) { c.err, c.retryAt = transient, now.Add(2*time.Minute) }),
			createFailed, "creation deadline would pass before a retry: try again"},
		{"permanent", with(func(c *createCall) { c.err = boom }), createFailed, "boom"},
	}
	for _, tc := range cases {
		got := classifyCreate(tc.call)
		if got.outcome != tc.want || got.message != tc.msg {
			t.Errorf("%s: got outcome %d message %q, want %d %q", tc.name, got.outcome, got.message, tc.want, tc.msg)
		}
		if got.outcome == createRetry && !got.retryAt.Equal(tc.call.retryAt) {
			t.Errorf("%s: retry at %v, want %v", tc.name, got.retryAt, tc.call.retryAt)
		}
	}
}

// TestClassifyTransition is the same table for a pause or resume call: no
// attempt limit, and a lasting error reverts rather than fails.
func TestClassifyTransition(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	boom := errors.New("boom")
	transient := domain.Retryable(errors.New("try again"))
	base := createCall{attempts: 40, retryAt: now.Add(time.Second), deadline: now.Add(time.Minute)}
	with := func(f func(*createCall)) createCall {
		c := base
		f(&c)
		return c
	}
	cases := []struct {
		name string
		call createCall
		want transitionOutcome
		msg  string
	}{
		{"success", base, transitionDone, ""},
		{"ended meanwhile", with(func(c *createCall) { c.err, c.cause = boom, errSandboxEnded }), transitionEnded, ""},
		{"lease lost", with(func(c *createCall) { c.err, c.cause = boom, errLeaseLost }), transitionLeaseLost, ""},
		{"stopping", with(func(c *createCall) { c.err, c.stopping = boom, true }), transitionHandBack, ""},
		{"deadline", with(func(c *createCall) { c.err, c.deadlinePassed = boom, true }), transitionFail, "pause deadline passed: boom"},
		{"transient, many attempts", with(func(c *createCall) { c.err = transient }), transitionRetry, ""},
		{"transient, retry past the deadline", with(func(c *createCall) { c.err, c.retryAt = transient, now.Add(2*time.Minute) }),
			transitionFail, "pause deadline would pass before a retry: try again"},
		{"refused", with(func(c *createCall) { c.err = boom }), transitionRevert, "boom"},
	}
	for _, tc := range cases {
		got := classifyTransition("pause", tc.call)
		if got.outcome != tc.want || got.message != tc.msg {
			t.Errorf("%s: got outcome %d message %q, want %d %q", tc.name, got.outcome, got.message, tc.want, tc.msg)
		}
		if got.outcome == transitionRetry && !got.retryAt.Equal(tc.call.retryAt) {
			t.Errorf("%s: retry at %v, want %v", tc.name, got.retryAt, tc.call.retryAt)
		}
	}
}
