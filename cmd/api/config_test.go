package main

import (
	"strings"
	"testing"
)

// TestLocalWorkspaceConfig: LOCAL_WORKSPACE_MB takes 0 (no limit) or a size
// from the provider's minimum up to LOCAL_MAX_WORKSPACE_MB; anything else
// is refused at start, naming the variable.
func TestLocalWorkspaceConfig(t *testing.T) {
	t.Parallel()
	cases := []struct {
		env     map[string]string
		def     int // the LocalLimits.WorkspaceMB wanted, if no error
		maxMB   int
		wantErr string
	}{
		{env: map[string]string{}, def: 10240, maxMB: 102400},
		{env: map[string]string{"LOCAL_WORKSPACE_MB": "0"}, def: 0, maxMB: 102400},
		{env: map[string]string{"LOCAL_WORKSPACE_MB": "10240"}, def: 10240, maxMB: 102400},
		{env: map[string]string{"LOCAL_WORKSPACE_MB": "512", "LOCAL_MAX_WORKSPACE_MB": "512"}, def: 512, maxMB: 512},
		{env: map[string]string{"LOCAL_WORKSPACE_MB": "-1"}, wantErr: `LOCAL_WORKSPACE_MB="-1": want 0 or a positive integer`},
		{env: map[string]string{"LOCAL_WORKSPACE_MB": "1G"}, wantErr: `LOCAL_WORKSPACE_MB="1G"`},
		{env: map[string]string{"LOCAL_WORKSPACE_MB": "8"}, wantErr: "LOCAL_WORKSPACE_MB (8) must be 0 (no limit) or at least 16"},
		{env: map[string]string{"LOCAL_WORKSPACE_MB": "2048", "LOCAL_MAX_WORKSPACE_MB": "1024"}, wantErr: "LOCAL_WORKSPACE_MB (2048) must not exceed LOCAL_MAX_WORKSPACE_MB (1024)"},
		{env: map[string]string{"LOCAL_MAX_WORKSPACE_MB": "0"}, wantErr: `LOCAL_MAX_WORKSPACE_MB="0": want a positive integer`},
	}
	for _, tc := range cases {
		cfg, err := loadConfig(func(name string) string {
			if name == "DATABASE_URL" {
				return "postgres://x@127.0.0.1/tether"
			}
			return tc.env[name]
		})
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%v: loadConfig = %v; want an error saying %q", tc.env, err, tc.wantErr)
			}
		case err != nil:
			t.Errorf("%v: loadConfig = %v", tc.env, err)
		case cfg.LocalLimits.WorkspaceMB != tc.def || cfg.LocalMaxLimits.WorkspaceMB != tc.maxMB:
			t.Errorf("%v: workspace limit %d, maximum %d; want %d, %d", tc.env, cfg.LocalLimits.WorkspaceMB, cfg.LocalMaxLimits.WorkspaceMB, tc.def, tc.maxMB)
		}
	}
}
