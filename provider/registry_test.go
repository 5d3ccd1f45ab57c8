package provider_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/tetherhq/tether/provider"
)

// named is the least a Provider can be: the registry only constructs
// providers and checks their name.
type named struct {
	name     string
	dir      string
	workers  int64
	insecure bool
}

func (n *named) Name() string { return n.name }
func (n *named) Info(context.Context) provider.Info {
	return provider.Info{Name: n.name, Available: true}
}
func (n *named) ValidateParams(json.RawMessage) error { return nil }
func (n *named) Create(_ context.Context, s provider.CreateSpec) (provider.Resource, error) {
	return provider.Resource{SandboxID: s.SandboxID}, nil
}
func (n *named) Destroy(context.Context, string) error { return nil }
func (n *named) List(context.Context) ([]provider.Resource, error) {
	return nil, nil
}

func fooRegistration() provider.Registration {
	return provider.Registration{
		Name: "foo",
		Settings: []provider.Setting{
			{Name: "FOO_DIR", Default: ".foo", Doc: "where foo keeps its state"},
			{Name: "FOO_WORKERS", Default: "4", Doc: "how many workers"},
			{Name: "FOO_INSECURE", Doc: "skip verification"},
		},
		New: func(_ context.Context, s *provider.Settings) (provider.Provider, error) {
			p := &named{name: "foo", dir: s.String("FOO_DIR"), workers: s.Int("FOO_WORKERS", 1), insecure: s.Bool("FOO_INSECURE")}
			if p.insecure && p.workers > 8 {
				s.Fail(errors.New("FOO_INSECURE allows at most 8 FOO_WORKERS"))
			}
			return p, nil
		},
	}
}

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestRegistrationOpen(t *testing.T) {
	reg := fooRegistration()
	p, err := reg.Open(t.Context(), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if got := p.(*named); got.dir != ".foo" || got.workers != 4 || got.insecure {
		t.Errorf("defaults: %+v", got)
	}
	p, err = reg.Open(t.Context(), env(map[string]string{"FOO_DIR": " /srv/foo ", "FOO_WORKERS": "7", "FOO_INSECURE": "true", "FOO_WORKERS_X": "1"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := p.(*named); got.dir != "/srv/foo" || got.workers != 7 || !got.insecure {
		t.Errorf("from the environment: %+v", got)
	}
	if p, err := reg.Open(t.Context(), env(map[string]string{"FOO_DIR": "   "})); err != nil || p.(*named).dir != ".foo" {
		t.Errorf("a blank value is the default: %+v, %v", p, err)
	}
}

func TestRegistrationOpenRefusesBadSettings(t *testing.T) {
	reg := fooRegistration()
	for _, tc := range []struct {
		env  map[string]string
		want []string
	}{
		{map[string]string{"FOO_WORKERS": "many", "FOO_INSECURE": "maybe"}, []string{`FOO_WORKERS="many"`, `FOO_INSECURE="maybe"`}},
		{map[string]string{"FOO_WORKERS": "0"}, []string{`FOO_WORKERS="0": want a positive integer`}},
		{map[string]string{"FOO_WORKERS": "9", "FOO_INSECURE": "1"}, []string{"at most 8"}},
	} {
		p, err := reg.Open(t.Context(), env(tc.env))
		if err == nil || p != nil {
			t.Errorf("%v: Open = %v, nil; want an error", tc.env, p)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) || !strings.HasPrefix(err.Error(), "provider foo: ") {
				t.Errorf("%v: error %q does not say %q", tc.env, err, w)
			}
		}
	}
}

func TestUndeclaredSettingPanics(t *testing.T) {
	reg := fooRegistration()
	reg.Settings = reg.Settings[:2] // FOO_INSECURE is read but no longer declared
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "FOO_INSECURE") {
			t.Errorf("recovered %v, want a panic naming FOO_INSECURE", r)
		}
	}()
	_, _ = reg.Open(t.Context(), env(nil))
	t.Error("Open read an undeclared setting without a panic")
}

func TestRegistrationNameMustMatch(t *testing.T) {
	reg := fooRegistration()
	reg.Name = "bar"
	if _, err := reg.Open(t.Context(), env(nil)); err == nil || !strings.Contains(err.Error(), "not bar") {
		t.Errorf("Open of a registration whose provider has another name: %v", err)
	}
}

func TestNewRegistryRefuses(t *testing.T) {
	foo := fooRegistration()
	other := fooRegistration()
	other.Name = "other"
	noNew := provider.Registration{Name: "x"}
	badSetting := provider.Registration{Name: "y", New: foo.New, Settings: []provider.Setting{{Name: "lower"}}}
	twice := provider.Registration{Name: "z", New: foo.New, Settings: []provider.Setting{{Name: "Z_A"}, {Name: "Z_A"}}}
	nodeDir := provider.Registration{Name: "w", New: foo.New, Settings: []provider.Setting{{Name: "W_DIR"}}, NodeDir: "W_STATE_DIR"}
	for name, regs := range map[string][]provider.Registration{
		"a name twice":             {foo, foo},
		"a setting in two":         {foo, other},
		"no constructor":           {noNew},
		"a bad setting name":       {badSetting},
		"a setting declared twice": {twice},
		"an undeclared NodeDir":    {nodeDir},
	} {
		if _, err := provider.NewRegistry(regs...); err == nil {
			t.Errorf("%s: NewRegistry succeeded", name)
		}
	}
}

func TestRegistryOpen(t *testing.T) {
	bar := fooRegistration()
	bar.Name = "bar"
	bar.Settings = nil
	bar.New = func(context.Context, *provider.Settings) (provider.Provider, error) { return &named{name: "bar"}, nil }
	r, err := provider.NewRegistry(fooRegistration(), bar)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(r.Names(), ","); got != "foo,bar" {
		t.Errorf("Names = %s", got)
	}
	if _, ok := r.Lookup("bar"); !ok {
		t.Error("Lookup(bar) found nothing")
	}
	if _, ok := r.Lookup("baz"); ok {
		t.Error("Lookup(baz) found something")
	}
	ps, err := r.Open(t.Context(), []string{"bar", "foo"}, env(nil))
	if err != nil || len(ps) != 2 || ps[0].Name() != "bar" || ps[1].Name() != "foo" {
		t.Fatalf("Open(bar, foo) = %v, %v", ps, err)
	}
	if _, err := r.Open(t.Context(), []string{"foo", "baz"}, env(nil)); err == nil || !strings.Contains(err.Error(), `unknown provider "baz" (known: foo, bar)`) {
		t.Errorf("Open of an unknown name: %v", err)
	}
	if _, err := r.Open(t.Context(), []string{"foo", "foo"}, env(nil)); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("Open of a name given twice: %v", err)
	}
	if _, err := r.Open(t.Context(), []string{"foo"}, env(map[string]string{"FOO_WORKERS": "x"})); err == nil {
		t.Error("Open with a bad setting succeeded")
	}
}
