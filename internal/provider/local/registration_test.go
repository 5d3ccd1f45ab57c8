package local_test

import (
	"strings"
	"testing"

	"github.com/tetherhq/tether/internal/provider/local"
	"github.com/tetherhq/tether/provider"
	"github.com/tetherhq/tether/test/harness"
)

func TestRegistration(t *testing.T) {
	t.Parallel()
	dir := harness.ReachableTempDir(t)
	open := func(env map[string]string) (provider.Provider, error) {
		env["LOCAL_STATE_DIR"] = dir
		return local.Registration.Open(t.Context(), func(k string) string { return env[k] })
	}
	p, err := open(map[string]string{})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.ValidateParams([]byte(`{"network":"host"}`)); provider.ErrorCode(err) != provider.CodeForbidden {
		t.Errorf("host network by default: %v, want FORBIDDEN", err)
	}
	if err := p.ValidateParams([]byte(`{"pids":5000}`)); provider.ErrorCode(err) != provider.CodeInvalidRequest {
		t.Errorf("pids over the default LOCAL_MAX_PIDS: %v, want INVALID_REQUEST", err)
	}
	p, err = open(map[string]string{"LOCAL_ALLOW_HOST_NETWORK": "true", "LOCAL_MAX_PIDS": "8192"})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.ValidateParams([]byte(`{"network":"host","pids":5000}`)); err != nil {
		t.Errorf("with LOCAL_ALLOW_HOST_NETWORK=true and LOCAL_MAX_PIDS=8192: %v", err)
	}
	if info := p.Info(t.Context()); !info.Available || info.Name != local.Name {
		t.Errorf("the registered provider: %+v", info)
	}
}

func TestRegistrationRefusesBadSettings(t *testing.T) {
	t.Parallel()
	dir := harness.ReachableTempDir(t)
	for _, tc := range []struct{ env, want string }{
		{"LOCAL_PIDS=0", `LOCAL_PIDS="0": want a positive integer`},
		{"LOCAL_WORKSPACE_MB=8", "must be 0 (no limit) or at least 16"},
		{"LOCAL_PIDS=5000", "must not exceed LOCAL_MAX_PIDS"},
		{"LOCAL_OPEN_FILES=70000", "must not exceed LOCAL_MAX_OPEN_FILES"},
		{"LOCAL_CGROUP_PARENT=.hidden", "LOCAL_CGROUP_PARENT"},
		{"LOCAL_EGRESS_POOL=10.0.0.0/30", "LOCAL_EGRESS_POOL"},
		{"LOCAL_UID_BASE=2147483000", "must not exceed 2147483647"},
		{"LOCAL_IMAGES=bad", "LOCAL_IMAGES"},
		{"LOCAL_ALLOW_UNLIMITED=perhaps", `LOCAL_ALLOW_UNLIMITED="perhaps"`},
	} {
		k, v, _ := strings.Cut(tc.env, "=")
		env := map[string]string{"LOCAL_STATE_DIR": dir, k: v}
		p, err := local.Registration.Open(t.Context(), func(k string) string { return env[k] })
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Open = %v, %v; want an error saying %q", tc.env, p, err, tc.want)
		}
	}
}
