package http

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/tetherhq/tether/internal/sandbox"
)

// Provider describes one enabled provider.
type Provider struct {
	Name string `json:"name" example:"sim"`
	// Default is true for the provider used when a create names none.
	Default bool `json:"default"`
	// Available is false when the provider cannot create sandboxes on this host; reason says why.
	Available    bool         `json:"available"`
	Reason       *string      `json:"reason"`
	Capabilities Capabilities `json:"capabilities"`
	// WorkDir is the working directory inside this provider's sandboxes.
	WorkDir *string  `json:"work_dir"`
	Notes   []string `json:"notes"`
} // @name Provider

// Capabilities are a provider's optional data-plane features.
type Capabilities struct {
	Exec  bool `json:"exec"`
	Files bool `json:"files"`
} // @name Capabilities

// ProviderList lists the enabled providers.
type ProviderList struct {
	Items []Provider `json:"items"`
} // @name ProviderList

// handleProviders lists the enabled providers.
//
//	@Summary		List providers
//	@Description	The providers enabled on this server, the default first, with their capabilities and whether each can create sandboxes on this host.
//	@Tags			providers
//	@Produce		json
//	@Success		200	{object}	ProviderList
//	@Failure		401	{object}	Problem
//	@Security		BearerAuth
//	@Router			/v1/providers [get]
func handleProviders(providers []sandbox.Provider) handlerFunc {
	return func(c *gin.Context) error {
		out := ProviderList{Items: make([]Provider, 0, len(providers))}
		for i, p := range providers {
			info := p.Info(c.Request.Context())
			notes := info.Notes
			if notes == nil {
				notes = []string{}
			}
			out.Items = append(out.Items, Provider{
				Name: p.Name(), Default: i == 0, Available: info.Available, Reason: optional(info.Reason),
				Capabilities: Capabilities{Exec: info.Exec, Files: info.Files},
				WorkDir:      optional(info.WorkDir), Notes: notes,
			})
		}
		return writeJSON(c, http.StatusOK, out)
	}
}
