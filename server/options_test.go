package server

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/tetherhq/tether/provider"
)

// extra is a provider of a program's own: it reports the one setting it
// declares as its WorkDir, so a test sees the value reach it.
type extra struct{ dir string }

func (e extra) Name() string { return "extra" }
func (e extra) Info(context.Context) provider.Info {
	return provider.Info{Name: "extra", Available: true, WorkDir: e.dir}
}
func (extra) ValidateParams(json.RawMessage) error { return nil }
func (extra) Create(_ context.Context, spec provider.CreateSpec) (provider.Resource, error) {
	return provider.Resource{SandboxID: spec.SandboxID}, nil
}
func (extra) Destroy(context.Context, string) error             { return nil }
func (extra) List(context.Context) ([]provider.Resource, error) { return nil, nil }

func extraRegistration(settings ...provider.Setting) provider.Registration {
	return provider.Registration{Name: "extra", Settings: settings, New: func(_ context.Context, s *provider.Settings) (provider.Provider, error) {
		return extra{dir: s.String("EXTRA_DIR")}, nil
	}}
}

// TestOptionsProviders: a program's own registration is a provider like
// the built-in ones: its settings are rows of the table after theirs,
// PROVIDERS names it, and it is built from its settings.
func TestOptionsProviders(t *testing.T) {
	ps, err := newProviderSet(extraRegistration(provider.Setting{Name: "EXTRA_DIR", Default: "/x", Doc: "a folder"}))
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0)
	for _, s := range ps.settings() {
		names = append(names, s.name)
	}
	if i, j := slices.Index(names, "EXTRA_DIR"), slices.Index(names, "LOCAL_STATE_DIR"); i < 0 || i < j {
		t.Errorf("EXTRA_DIR is not listed after the built-in providers' settings: %v", names)
	}
	cfg, err := ps.loadConfig(func(name string) string {
		return map[string]string{"DATABASE_URL": "postgres://x@y/z", "PROVIDERS": "extra,sim", "EXTRA_DIR": "/work", "SIM_STATE_DIR": t.TempDir()}[name]
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := buildProviders(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Name() != "extra" || got[0].Info(t.Context()).WorkDir != "/work" {
		t.Errorf("providers built: %v", got)
	}
	if _, err := builtinSet.loadConfig(func(name string) string {
		return map[string]string{"DATABASE_URL": "postgres://x@y/z", "PROVIDERS": "extra"}[name]
	}); err == nil || !strings.Contains(err.Error(), `unknown provider "extra"`) {
		t.Errorf("the binary without the registration took PROVIDERS=extra: %v", err)
	}
}

// TestOptionsProvidersRefused: a registration that would shadow a
// built-in provider or a setting of the service stops the program.
func TestOptionsProvidersRefused(t *testing.T) {
	for name, reg := range map[string]provider.Registration{
		"a built-in name":      {Name: "sim", New: extraRegistration().New},
		"a built-in's setting": extraRegistration(provider.Setting{Name: "LOCAL_STATE_DIR"}),
		"a service setting":    extraRegistration(provider.Setting{Name: "DATABASE_URL"}),
		"no constructor":       {Name: "extra"},
	} {
		if _, err := newProviderSet(reg); err == nil {
			t.Errorf("%s: accepted", name)
		}
		if err := Run(t.Context(), []string{"help"}, Options{Providers: []provider.Registration{reg}}); err == nil {
			t.Errorf("%s: Run accepted it", name)
		}
	}
}
