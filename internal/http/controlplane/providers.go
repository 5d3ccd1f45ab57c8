package controlplane

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/http/httpapi"
)

// Provider describes one enabled provider.
type Provider struct {
	Name string `json:"name" example:"sim"`
	// Default is true for the provider used when a create names none.
	Default bool `json:"default"`
	// Available is false when the provider cannot create sandboxes on this host; reason says why.
	Available bool `json:"available" example:"true"`
	// Reason says why the provider is unavailable; null when it is available.
	Reason       *string      `json:"reason" extensions:"x-nullable" example:"bubblewrap (bwrap) is not installed"`
	Capabilities Capabilities `json:"capabilities"`
	// WorkDir is the working directory inside this provider's sandboxes; null when the provider has none.
	WorkDir *string `json:"work_dir" extensions:"x-nullable" example:"/workspace"`
	// Images are the root file systems the operator registered, which a create asks for by name in params.image (the local provider); empty when there are none.
	Images []ProviderImage `json:"images"`
	// Notes are facts about the provider worth knowing, such as its limits.
	Notes []string `json:"notes" example:"no network by default"`
} // @name Provider

// ProviderImage is a root file system a create may ask for by name.
type ProviderImage struct {
	// Name is what a create puts in params.image.
	Name string `json:"name" example:"bookworm"`
	// Source is what the operator registered: a folder, or a tarball the server unpacked.
	Source string `json:"source" enums:"folder,tarball" x-enum-varnames:"ImageSourceFolder,ImageSourceTarball" example:"folder"`
} // @name ProviderImage

// Capabilities are a provider's optional data-plane features.
type Capabilities struct {
	// Exec is true when the provider runs commands (POST /v1/sandboxes/{id}/exec).
	Exec bool `json:"exec" example:"true"`
	// Files is true when the provider moves files and archives in and out.
	Files bool `json:"files" example:"true"`
	// Pause is true when the provider pauses and resumes sandboxes (POST /v1/sandboxes/{id}/pause and /resume); without it they are 501 NOT_SUPPORTED.
	Pause bool `json:"pause" example:"true"`
	// Ports is true when the provider reaches ports inside sandboxes (/v1/sandboxes/{id}/ports/{port}/ and preview URLs); without it they are 501 NOT_SUPPORTED.
	Ports bool `json:"ports" example:"true"`
	// Snapshot is true when the provider snapshots sandboxes' workspaces (POST /v1/sandboxes/{id}/snapshots, from_snapshot, on_end snapshot); without it they are 501 NOT_SUPPORTED.
	Snapshot bool `json:"snapshot" example:"true"`
	// MemorySnapshots is true when the provider also snapshots whole machines, memory included (POST /v1/sandboxes/{id}/snapshots {"memory": true}), which sandboxes created from_snapshot resume: forks. Without it such a request is 501 NOT_SUPPORTED.
	MemorySnapshots bool `json:"memory_snapshots" example:"false"`
	// Processes is true when the provider runs background processes (/v1/sandboxes/{id}/processes); without it they are 501 NOT_SUPPORTED.
	Processes bool `json:"processes" example:"true"`
	// PTY is true when the provider gives processes terminals (pty in a start, .../resize, .../terminal); without it they are 501 NOT_SUPPORTED.
	PTY bool `json:"pty" example:"true"`
	// Watch is true when the provider watches folders for changes (/v1/sandboxes/{id}/watch); without it it is 501 NOT_SUPPORTED.
	Watch bool `json:"watch" example:"true"`
} // @name Capabilities

// ProviderList lists the enabled providers.
type ProviderList struct {
	Items []Provider `json:"items"`
} // @name ProviderList

// HandleProviders lists the enabled providers.
//
//	@Summary		List providers
//	@Description	The providers enabled on this server, the default first, with their capabilities, their images and whether each can create sandboxes on this host.
//	@ID				listProviders
//	@Tags			providers
//	@Produce		json
//	@Success		200	{object}	ProviderList
//	@Failure		400	{object}	httpapi.Problem				"INVALID_REQUEST: a query parameter (it takes none)"
//	@Security		BearerAuth
//	@Router			/v1/providers [get]
func HandleProviders(providers []domain.Provider) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		if err := httpapi.OnlyQuery(c); err != nil {
			return err
		}
		out := ProviderList{Items: make([]Provider, 0, len(providers))}
		for i, p := range providers {
			info := p.Info(c.Request.Context())
			notes := info.Notes
			if notes == nil {
				notes = []string{}
			}
			images := make([]ProviderImage, 0, len(info.Images))
			for _, img := range info.Images {
				images = append(images, ProviderImage{Name: img.Name, Source: img.Source})
			}
			out.Items = append(out.Items, Provider{
				Name: p.Name(), Default: i == 0, Available: info.Available, Reason: httpapi.Optional(info.Reason),
				Capabilities: Capabilities{Exec: info.Exec, Files: info.Files, Pause: domain.CanPause(p), Ports: domain.CanDialPorts(p), Snapshot: domain.CanSnapshot(p), MemorySnapshots: domain.CanSnapshotMemory(p),
					Processes: domain.CanRunProcesses(p), PTY: domain.CanPTY(p), Watch: domain.CanWatchFiles(p)},
				WorkDir: httpapi.Optional(info.WorkDir), Images: images, Notes: notes,
			})
		}
		return httpapi.WriteJSON(c, http.StatusOK, out)
	}
}
