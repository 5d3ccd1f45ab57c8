package server

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/domain"
	tetherhttp "github.com/tetherhq/tether/internal/http"
	"github.com/tetherhq/tether/provider"
	"github.com/tetherhq/tether/test/harness"
)

// loadAndBuild is a start up to its providers: the configuration from env
// (and a database URL), then the providers it enables.
func loadAndBuild(t *testing.T, env map[string]string) (config, []domain.Provider, error) {
	t.Helper()
	cfg, err := loadConfig(func(name string) string {
		if name == "DATABASE_URL" {
			return "postgres://x@127.0.0.1/tether"
		}
		return env[name]
	})
	if err != nil {
		return cfg, nil, err
	}
	ps, err := buildProviders(t.Context(), cfg)
	return cfg, ps, err
}

// TestLocalWorkspaceConfig: LOCAL_WORKSPACE_MB takes 0 (no limit) or a size
// from the provider's minimum up to LOCAL_MAX_WORKSPACE_MB; anything else
// is refused at start, naming the variable.
func TestLocalWorkspaceConfig(t *testing.T) {
	t.Parallel()
	cases := []struct {
		env        map[string]string
		def, maxMB string // the values kept, if no error
		wantErr    string
	}{
		{env: map[string]string{}, def: "1024", maxMB: "102400"},
		{env: map[string]string{"LOCAL_WORKSPACE_MB": "0"}, def: "0", maxMB: "102400"},
		{env: map[string]string{"LOCAL_WORKSPACE_MB": " 10240 "}, def: "10240", maxMB: "102400"},
		{env: map[string]string{"LOCAL_WORKSPACE_MB": "512", "LOCAL_MAX_WORKSPACE_MB": "512"}, def: "512", maxMB: "512"},
		{env: map[string]string{"LOCAL_WORKSPACE_MB": "-1"}, wantErr: `LOCAL_WORKSPACE_MB="-1": want 0 or a positive integer`},
		{env: map[string]string{"LOCAL_WORKSPACE_MB": "1G"}, wantErr: `LOCAL_WORKSPACE_MB="1G"`},
		{env: map[string]string{"LOCAL_WORKSPACE_MB": "8"}, wantErr: "LOCAL_WORKSPACE_MB (8) must be 0 (no limit) or at least 16"},
		{env: map[string]string{"LOCAL_WORKSPACE_MB": "2048", "LOCAL_MAX_WORKSPACE_MB": "1024"}, wantErr: "LOCAL_WORKSPACE_MB (2048) must not exceed LOCAL_MAX_WORKSPACE_MB (1024)"},
		{env: map[string]string{"LOCAL_MAX_WORKSPACE_MB": "0"}, wantErr: `LOCAL_MAX_WORKSPACE_MB="0": want a positive integer`},
	}
	for _, tc := range cases {
		if tc.wantErr == "" {
			// Kept for the registration; TestProviderSettingsReachTheProviders
			// builds one.
			cfg, err := loadConfig(func(name string) string {
				return map[string]string{"DATABASE_URL": "postgres://x@127.0.0.1/tether"}[name] + tc.env[name]
			})
			if got := [2]string{cfg.ProviderSettings["LOCAL_WORKSPACE_MB"], cfg.ProviderSettings["LOCAL_MAX_WORKSPACE_MB"]}; err != nil || got != [2]string{tc.def, tc.maxMB} {
				t.Errorf("%v: loadConfig = %v, keeps %v; want %s, %s", tc.env, err, got, tc.def, tc.maxMB)
			}
			continue
		}
		tc.env["PROVIDERS"] = "local"
		if _, _, err := loadAndBuild(t, tc.env); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%v: the start = %v; want an error saying %q", tc.env, err, tc.wantErr)
		}
	}
}

// TestLocalImagesConfig: every bad pair of LOCAL_IMAGES is reported at
// start, all at once, naming the variable (local's TestParseImages has the
// good ones).
func TestLocalImagesConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	folder, other := filepath.Join(dir, "bookworm"), filepath.Join(dir, "notes.txt")
	if err := os.Mkdir(folder, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(other, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err := loadAndBuild(t, map[string]string{"PROVIDERS": "local", "LOCAL_IMAGES": "Bad=" + folder + ",rel=images/x,gone=" +
		filepath.Join(dir, "missing") + ",txt=" + other + ",bookworm=" + folder + ",bookworm=" + folder + ",nopath,empty="})
	if err == nil {
		t.Fatal("the start accepted bad LOCAL_IMAGES")
	}
	for _, want := range []string{
		`image name "Bad" must match`,
		`image "rel": path "images/x" must be absolute`,
		`image "gone": stat ` + filepath.Join(dir, "missing"),
		`image "txt": ` + other + ` must be a folder, or a file ending in .tar, .tar.gz or .tgz`,
		`image "bookworm" is named twice`,
		`"nopath": want name=/absolute/path`,
		`"empty=": want name=/absolute/path`,
	} {
		if !strings.Contains(err.Error(), "LOCAL_IMAGES: "+want) {
			t.Errorf("the error does not say %q:\n%v", want, err)
		}
	}
}

// TestProviderSettingsReachTheProviders: the providers PROVIDERS names are
// built in its order, each from its own settings.
func TestProviderSettingsReachTheProviders(t *testing.T) {
	t.Parallel()
	simDir := filepath.Join(t.TempDir(), "sim")
	_, ps, err := loadAndBuild(t, map[string]string{"PROVIDERS": " local, sim", "SIM_STATE_DIR": simDir,
		"LOCAL_STATE_DIR": harness.ReachableTempDir(t), "LOCAL_ALLOW_HOST_NETWORK": "true",
		"LOCAL_WORKSPACE_MB": " 512", "LOCAL_MAX_WORKSPACE_MB": "512"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 2 || ps[0].Name() != "local" || ps[1].Name() != "sim" {
		t.Fatalf("providers %v; want local, sim", ps)
	}
	if err := ps[0].ValidateParams([]byte(`{"network":"host","workspace_mb":512}`)); err != nil {
		t.Errorf("host network and workspace_mb at LOCAL_MAX_WORKSPACE_MB: %v", err)
	}
	if err := ps[0].ValidateParams([]byte(`{"workspace_mb":1024}`)); provider.ErrorCode(err) != provider.CodeInvalidRequest {
		t.Errorf("workspace_mb over LOCAL_MAX_WORKSPACE_MB: %v, want INVALID_REQUEST", err)
	}
	if _, err := os.Stat(simDir); err != nil {
		t.Errorf("sim does not keep its inventory in SIM_STATE_DIR: %v", err)
	}
}

// TestProvidersConfig: PROVIDERS names known providers, once each; the
// start refuses others before any is built.
func TestProvidersConfig(t *testing.T) {
	t.Parallel()
	for value, want := range map[string]string{
		"sim,kvm":   `PROVIDERS: unknown provider "kvm" (known: sim, local, kubernetes, microvm)`,
		"sim,sim":   `PROVIDERS names "sim" twice`,
		",":         "PROVIDERS: name at least one provider",
		"local,sim": "",
	} {
		_, err := loadConfig(func(name string) string {
			return map[string]string{"DATABASE_URL": "postgres://x@127.0.0.1/tether", "PROVIDERS": value}[name]
		})
		if (want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), want) {
			t.Errorf("PROVIDERS=%q: loadConfig = %v; want %q", value, err, want)
		}
	}
}

// TestNodeIDDefault: an unset NODE_ID is derived from the host name and
// the node's folder, LOCAL_STATE_DIR (local.Registration's NodeDir).
func TestNodeIDDefault(t *testing.T) {
	t.Parallel()
	host, _ := os.Hostname()
	for _, dir := range []string{"", "/srv/tether/local"} {
		cfg, err := loadConfig(func(name string) string {
			return map[string]string{"DATABASE_URL": "postgres://x@127.0.0.1/tether", "LOCAL_STATE_DIR": dir}[name]
		})
		want := defaultNodeID(host, dir)
		if dir == "" {
			want = defaultNodeID(host, ".tether/local")
		}
		if err != nil || cfg.NodeID != want || cfg.NodeIDSet {
			t.Errorf("LOCAL_STATE_DIR=%q: NODE_ID %q (set %v), %v; want %q", dir, cfg.NodeID, cfg.NodeIDSet, err, want)
		}
	}
}

// TestPausedTTLConfig: PAUSED_TTL is 0 unset (the TTL runs while paused),
// takes 0 or a positive duration, and refuses anything else.
func TestPausedTTLConfig(t *testing.T) {
	t.Parallel()
	for value, want := range map[string]time.Duration{"": 0, "0": 0, "0s": 0, "72h": 72 * time.Hour, "-1h": -1, "soon": -1} {
		cfg, err := loadConfig(func(name string) string {
			return map[string]string{"DATABASE_URL": "postgres://x@127.0.0.1/tether", "PAUSED_TTL": value}[name]
		})
		if want < 0 {
			if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("PAUSED_TTL=%q: want 0 or a positive Go duration", value)) {
				t.Errorf("PAUSED_TTL=%q: loadConfig = %v; want it refused", value, err)
			}
			continue
		}
		if err != nil || cfg.PausedTTL != want {
			t.Errorf("PAUSED_TTL=%q: PausedTTL %v, %v; want %v", value, cfg.PausedTTL, err, want)
		}
	}
}

// TestTenantQuotaConfig: TENANT_MAX_LIVE and TENANT_CREATES_PER_MINUTE take
// a positive integer, or 0 for no limit (as SNAPSHOT_MAX_PER_TENANT does),
// which the API's configuration holds as NoLimit (its 0 is the default);
// anything else is refused at start, naming the variable.
func TestTenantQuotaConfig(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"TENANT_MAX_LIVE", "TENANT_CREATES_PER_MINUTE"} {
		for value, want := range map[string]int{"0": tetherhttp.NoLimit, "7": 7, "-1": 0, "many": 0} {
			cfg, err := loadConfig(func(n string) string {
				return map[string]string{"DATABASE_URL": "postgres://x@127.0.0.1/tether", name: value}[n]
			})
			if want == 0 {
				if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%s=%q: want 0 (no limit) or a positive integer", name, value)) {
					t.Errorf("%s=%q: loadConfig = %v; want it refused", name, value, err)
				}
				continue
			}
			got := map[string]int{"TENANT_MAX_LIVE": cfg.HTTP.TenantMaxLive, "TENANT_CREATES_PER_MINUTE": cfg.HTTP.TenantCreatesPerMinute}[name]
			if err != nil || got != want {
				t.Errorf("%s=%q: %d, %v; want %d", name, value, got, err, want)
			}
		}
	}
}

// TestTrustedProxiesConfig: TRUSTED_PROXIES takes addresses and CIDRs,
// separated by commas or blanks; none by default; anything else refuses
// the start.
func TestTrustedProxiesConfig(t *testing.T) {
	t.Parallel()
	for value, want := range map[string]string{
		"":                                     "",
		"10.0.0.0/8":                           "10.0.0.0/8",
		"\t10.1.2.3, 192.168.0.0/16\tfd00::/8": "10.1.2.3/32 192.168.0.0/16 fd00::/8",
		"10.1.2.3/8":                           "10.0.0.0/8",
		"::1":                                  "::1/128",
		"proxy.internal":                       "refused",
		"10.0.0.0/33":                          "refused",
		"fe80::1%eth0":                         "refused",
	} {
		cfg, err := loadConfig(func(name string) string {
			return map[string]string{"DATABASE_URL": "postgres://x@127.0.0.1/tether", "TRUSTED_PROXIES": value}[name]
		})
		if want == "refused" {
			if err == nil || !strings.Contains(err.Error(), "TRUSTED_PROXIES") {
				t.Errorf("TRUSTED_PROXIES=%q: loadConfig = %v; want it refused", value, err)
			}
			continue
		}
		var got []string
		for _, p := range cfg.HTTP.TrustedProxies {
			got = append(got, p.String())
		}
		if err != nil || strings.Join(got, " ") != want {
			t.Errorf("TRUSTED_PROXIES=%q: %v, %v; want %s", value, got, err, want)
		}
	}
}

// TestE2BDomainConfig: E2B_DOMAIN is a DNS name, lower-cased, unset by
// default (no E2B sandbox hosts); it may be PREVIEW_HOST; anything else,
// or E2B's hosts with E2B's protocol turned off, refuses the start.
func TestE2BDomainConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{}, ""},
		{map[string]string{"E2B_DOMAIN": " E2B.Example.com "}, "e2b.example.com"},
		{map[string]string{"E2B_DOMAIN": "preview.example.com", "PREVIEW_HOST": "preview.example.com"}, "preview.example.com"},
		{map[string]string{"E2B_DOMAIN": "example"}, "refused"},
		{map[string]string{"E2B_DOMAIN": "*.e2b.example.com"}, "refused"},
		{map[string]string{"E2B_DOMAIN": "https://e2b.example.com"}, "refused"},
		{map[string]string{"E2B_DOMAIN": "e2b.example.com:443"}, "refused"},
		{map[string]string{"E2B_DOMAIN": "e2b.example.com", "E2B_DISABLED": "true"}, "refused"},
	} {
		cfg, err := loadConfig(func(name string) string {
			if name == "DATABASE_URL" {
				return "postgres://x@127.0.0.1/tether"
			}
			return tc.env[name]
		})
		if tc.want == "refused" {
			if err == nil || !strings.Contains(err.Error(), "E2B_DOMAIN") {
				t.Errorf("%v: loadConfig = %v; want it refused", tc.env, err)
			}
			continue
		}
		if err != nil || cfg.HTTP.E2BDomain != tc.want {
			t.Errorf("%v: E2BDomain %q, %v; want %q", tc.env, cfg.HTTP.E2BDomain, err, tc.want)
		}
	}
}
