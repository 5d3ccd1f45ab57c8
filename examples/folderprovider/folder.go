// Package folder is a Tether provider kept outside Tether's module: each
// sandbox is a folder named by its id in the provider's state folder
// (FOLDER_STATE_DIR), holding the create's tenant. It implements the core
// contract only (no exec or files), which is all a provider must: the
// conformance suite skips the capabilities it does not claim.
package folder

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/tetherhq/tether/provider"
)

// Name is the provider's name, as PROVIDERS and clients name it.
const Name = "folder"

// Registration makes the provider one of a Tether's: pass it to
// server.Options.Providers.
var Registration = provider.Registration{
	Name: Name,
	Settings: []provider.Setting{
		{Name: "FOLDER_STATE_DIR", Default: "/var/lib/tether-folder", Doc: "where the folder provider keeps its sandboxes"},
	},
	New: func(_ context.Context, s *provider.Settings) (provider.Provider, error) {
		return New(s.String("FOLDER_STATE_DIR"))
	},
}

// Provider keeps its sandboxes as folders in dir.
type Provider struct{ dir string }

// New returns a provider over the state folder dir, made if missing.
func New(dir string) (*Provider, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("folder: %w", err)
	}
	return &Provider{dir: dir}, nil
}

// Name implements provider.Provider.
func (p *Provider) Name() string { return Name }

// Info implements provider.Provider.
func (p *Provider) Info(context.Context) provider.Info {
	return provider.Info{Name: Name, Available: true}
}

// ValidateParams implements provider.Provider: the provider takes none.
func (p *Provider) ValidateParams(params json.RawMessage) error {
	switch string(params) {
	case "", "null", "{}":
		return nil
	}
	return provider.Errorf(provider.CodeInvalidRequest, "the folder provider takes no params")
}

// Create implements provider.Provider. The folder is the resource, so a
// second call for one sandbox finds it and makes nothing.
func (p *Provider) Create(ctx context.Context, spec provider.CreateSpec) (provider.Resource, error) {
	if err := p.ValidateParams(spec.Params); err != nil {
		return provider.Resource{}, err
	}
	if !provider.ValidSandboxID(spec.SandboxID) {
		return provider.Resource{}, fmt.Errorf("folder: create: invalid sandbox id %q", spec.SandboxID)
	}
	if spec.FromSnapshot != "" {
		return provider.Resource{}, errors.New("folder: create: no snapshots here")
	}
	dir := filepath.Join(p.dir, spec.SandboxID)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return provider.Resource{}, provider.Retryable(fmt.Errorf("folder: create: %w", err))
	}
	if err := os.WriteFile(filepath.Join(dir, "tenant"), []byte(spec.Tenant), 0o600); err != nil {
		return provider.Resource{}, provider.Retryable(fmt.Errorf("folder: create: %w", err))
	}
	return p.resource(spec.SandboxID)
}

// Destroy implements provider.Provider: nothing left is success.
func (p *Provider) Destroy(ctx context.Context, sandboxID string) error {
	if !provider.ValidSandboxID(sandboxID) {
		return nil // never one of ours
	}
	if err := os.RemoveAll(filepath.Join(p.dir, sandboxID)); err != nil {
		return fmt.Errorf("folder: destroy: %w", err)
	}
	return nil
}

// List implements provider.Provider, from the state folder alone.
func (p *Provider) List(ctx context.Context) ([]provider.Resource, error) {
	entries, err := os.ReadDir(p.dir)
	if err != nil {
		return nil, fmt.Errorf("folder: list: %w", err)
	}
	var out []provider.Resource
	for _, e := range entries {
		if e.IsDir() && provider.ValidSandboxID(e.Name()) {
			res, err := p.resource(e.Name())
			if err != nil {
				continue // destroyed meanwhile
			}
			out = append(out, res)
		}
	}
	return out, nil
}

func (p *Provider) resource(id string) (provider.Resource, error) {
	fi, err := os.Stat(filepath.Join(p.dir, id))
	if err != nil {
		return provider.Resource{}, fmt.Errorf("folder: %w", err)
	}
	return provider.Resource{SandboxID: id, ProviderID: "folder/" + id, CreatedAt: fi.ModTime().UTC()}, nil
}
