package provider

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Setting is one configuration value of a provider, read from an
// environment variable.
type Setting struct {
	// Name is the environment variable: upper case, digits and '_', by
	// convention starting with the provider's name (SIM_STATE_DIR).
	Name string
	// Default is the value when the variable is unset or blank; "" for
	// none.
	Default string
	// Doc says what the value means and what it accepts.
	Doc string
}

// Registration is what makes a provider one of Tether's: its name, its
// settings and its constructor. A provider package exports one (for
// instance sim.Registration), so that adding a provider is its folder plus
// one line where Tether lists its registrations.
type Registration struct {
	// Name is the provider's name, as PROVIDERS and clients name it; the
	// provider New returns must report the same Name.
	Name string
	// Settings are every setting New reads, in the order they are
	// documented.
	Settings []Setting
	// New constructs the provider from its settings. It reads them only
	// through s (an undeclared name panics), and returns an error for
	// settings it cannot use. A provider that cannot run on this host is
	// not an error: it reports Available false in Info.
	New func(ctx context.Context, s *Settings) (Provider, error)
	// NodeDir, for a host-bound provider that keeps its state in a folder
	// on the host, names the setting (one of Settings) of that folder.
	// Tether derives the node's default id from it (two folders on one
	// host are two nodes) and keeps the id there, so that it outlives a
	// renamed host. "" for none.
	NodeDir string
	// Uses names settings of the service itself (not the provider's own,
	// and documented by the service) that New reads too, such as
	// DATABASE_URL.
	Uses []string
}

// settingName is what a Setting's Name may be.
var settingName = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)

// check reports what is wrong with the registration itself.
func (r Registration) check() error {
	if r.Name == "" || r.New == nil {
		return fmt.Errorf("provider: registration %q: a name and New are required", r.Name)
	}
	seen := make(map[string]bool, len(r.Settings))
	for _, s := range r.Settings {
		if !settingName.MatchString(s.Name) || seen[s.Name] {
			return fmt.Errorf("provider: registration %q: setting %q is not a valid name or is declared twice", r.Name, s.Name)
		}
		seen[s.Name] = true
	}
	if r.NodeDir != "" && !seen[r.NodeDir] {
		return fmt.Errorf("provider: registration %q: NodeDir %q is not one of its settings", r.Name, r.NodeDir)
	}
	return nil
}

// Open resolves the registration's settings with getenv (os.Getenv, or a
// test's map) and constructs the provider.
func (r Registration) Open(ctx context.Context, getenv func(string) string) (Provider, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	s := &Settings{values: make(map[string]string, len(r.Settings))}
	for _, def := range r.Settings {
		v := strings.TrimSpace(getenv(def.Name))
		if v == "" {
			v = def.Default
		}
		s.values[def.Name] = v
	}
	for _, name := range r.Uses {
		s.values[name] = strings.TrimSpace(getenv(name))
	}
	p, err := r.New(ctx, s)
	if err == nil {
		err = s.Err()
	}
	if err != nil {
		return nil, fmt.Errorf("provider %s: %w", r.Name, err)
	}
	if p == nil || p.Name() != r.Name {
		return nil, fmt.Errorf("provider %s: New returned a provider that is not %s", r.Name, r.Name)
	}
	return p, nil
}

// Settings are a registration's settings, resolved: each declared name to
// its value or its default. The typed readers record a value they cannot
// parse; Err returns every such problem, and Open fails with them.
type Settings struct {
	values map[string]string
	errs   []error
}

// String returns the setting's value. It panics if name was not declared:
// a registration's settings are its documentation, and must be complete.
func (s *Settings) String(name string) string {
	v, ok := s.values[name]
	if !ok {
		panic(fmt.Sprintf("provider: setting %s read but not declared", name))
	}
	return v
}

// Int returns the setting's value as an integer of at least minimum; an
// empty value is 0. A value that is not one is recorded and 0 returned.
func (s *Settings) Int(name string, minimum int64) int64 {
	v := s.String(name)
	if v == "" {
		v = "0"
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < minimum {
		s.Fail(fmt.Errorf("%s=%q: want %s", name, v, atLeast(minimum)))
		return 0
	}
	return n
}

// atLeast says what an integer of at least minimum is, as the other
// settings' errors say it.
func atLeast(minimum int64) string {
	switch minimum {
	case 0:
		return "0 or a positive integer"
	case 1:
		return "a positive integer"
	}
	return fmt.Sprintf("an integer of at least %d", minimum)
}

// Bool returns the setting's value as a boolean; an empty value is false.
// A value that is not one is recorded and false returned.
func (s *Settings) Bool(name string) bool {
	v := s.String(name)
	if v == "" {
		return false
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		s.Fail(fmt.Errorf("%s=%q: want true or false", name, v))
	}
	return b
}

// Fail records a problem with the settings, such as two that contradict
// each other.
func (s *Settings) Fail(err error) { s.errs = append(s.errs, err) }

// Err returns every problem recorded so far, joined, or nil.
func (s *Settings) Err() error { return errors.Join(s.errs...) }

// Registry is the set of providers Tether knows, by name.
type Registry struct {
	regs []Registration
}

// NewRegistry returns a registry of regs, refusing a registration without
// a name or constructor, a name registered twice and a setting declared by
// two registrations.
func NewRegistry(regs ...Registration) (*Registry, error) {
	names := map[string]bool{}
	settings := map[string]string{}
	for _, r := range regs {
		if err := r.check(); err != nil {
			return nil, err
		}
		if names[r.Name] {
			return nil, fmt.Errorf("provider: %q is registered twice", r.Name)
		}
		names[r.Name] = true
		for _, s := range r.Settings {
			if other, ok := settings[s.Name]; ok {
				return nil, fmt.Errorf("provider: setting %s is declared by both %s and %s", s.Name, other, r.Name)
			}
			settings[s.Name] = r.Name
		}
	}
	return &Registry{regs: slices.Clone(regs)}, nil
}

// Names returns the registered names, in registration order.
func (r *Registry) Names() []string {
	out := make([]string, len(r.regs))
	for i, reg := range r.regs {
		out[i] = reg.Name
	}
	return out
}

// Lookup returns the registration named name.
func (r *Registry) Lookup(name string) (Registration, bool) {
	i := slices.IndexFunc(r.regs, func(reg Registration) bool { return reg.Name == name })
	if i < 0 {
		return Registration{}, false
	}
	return r.regs[i], true
}

// Open constructs the providers named, in that order (Tether's PROVIDERS:
// the first is the default), each from its settings read with getenv. A
// name that is not registered, or is named twice, is an error, as is any
// provider's construction.
func (r *Registry) Open(ctx context.Context, names []string, getenv func(string) string) ([]Provider, error) {
	out := make([]Provider, 0, len(names))
	seen := make(map[string]bool, len(names))
	for _, name := range names {
		if seen[name] {
			return nil, fmt.Errorf("provider: %q is named twice", name)
		}
		seen[name] = true
		reg, ok := r.Lookup(name)
		if !ok {
			return nil, fmt.Errorf("provider: unknown provider %q (known: %s)", name, strings.Join(r.Names(), ", "))
		}
		p, err := reg.Open(ctx, getenv)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}
