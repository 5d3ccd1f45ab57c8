package provider_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/tetherhq/tether/provider"
)

func TestErrorCodeAndRetryable(t *testing.T) {
	base := provider.Errorf(provider.CodeFileNotFound, "no file at %s", "/x")
	if base.Error() != "FILE_NOT_FOUND: no file at /x" {
		t.Errorf("Error() = %q", base.Error())
	}
	wrapped := fmt.Errorf("op: %w", provider.Retryable(base))
	if provider.ErrorCode(wrapped) != provider.CodeFileNotFound || !provider.IsRetryable(wrapped) {
		t.Errorf("wrapped: code %s, retryable %v", provider.ErrorCode(wrapped), provider.IsRetryable(wrapped))
	}
	plain := errors.New("boom")
	if provider.ErrorCode(plain) != provider.CodeInternal || provider.IsRetryable(plain) {
		t.Error("a plain error is internal and not retryable")
	}
	if provider.Retryable(nil) != nil {
		t.Error("Retryable(nil) is not nil")
	}
}

func TestSandboxIDs(t *testing.T) {
	a, b := provider.NewSandboxID(), provider.NewSandboxID()
	if a == b || !provider.ValidSandboxID(a) || len(a) != 30 {
		t.Errorf("NewSandboxID: %q, %q", a, b)
	}
	for _, bad := range []string{"", "sbx_", a[:29], a + "0", "SBX" + a[3:], a[:29] + "z", "sbx_" + "u" + a[5:]} {
		if provider.ValidSandboxID(bad) {
			t.Errorf("ValidSandboxID(%q) = true", bad)
		}
	}
}

func TestPaused(t *testing.T) {
	err := fmt.Errorf("exec: %w", provider.Paused("sbx_1", "run commands in it"))
	if !provider.IsPaused(err) || provider.ErrorCode(err) != provider.CodeStateConflict {
		t.Fatalf("Paused: IsPaused %v, code %s", provider.IsPaused(err), provider.ErrorCode(err))
	}
	if got, want := err.Error(), "exec: SANDBOX_STATE_CONFLICT: sandbox sbx_1 is paused: cannot run commands in it"; got != want {
		t.Errorf("message %q, want %q", got, want)
	}
	if provider.IsPaused(provider.Errorf(provider.CodeStateConflict, "x")) || provider.IsPaused(nil) {
		t.Error("IsPaused holds for an error Paused did not make")
	}
}
