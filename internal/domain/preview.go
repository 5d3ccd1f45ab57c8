package domain

import (
	"strings"
	"time"
)

// PreviewTokenPrefix starts every preview token, so that leaked ones are
// easy to recognise; PreviewIDPrefix starts every preview's (public) id.
const (
	PreviewTokenPrefix = "tpv_"
	PreviewIDPrefix    = "prv_"
)

// ValidPreviewToken reports whether s has the shape of a preview token
// (the prefix and 40 bytes, base64url: 32 random and a tag; or, made
// before tags, 32 random bytes): others are unknown without a query.
func ValidPreviewToken(s string) bool {
	rest, ok := strings.CutPrefix(s, PreviewTokenPrefix)
	return ok && (len(rest) == 54 || len(rest) == 43) && !strings.ContainsFunc(rest, func(r rune) bool {
		return (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') && r != '-' && r != '_'
	})
}

// Preview is a URL that reaches one port of one sandbox without an API
// key: its token is a secret shown once, at creation, and kept hashed. It
// works until ExpiresAt, until it is revoked, and only while the sandbox
// is ready; it never starts or resumes anything.
type Preview struct {
	ID        string
	SandboxID string
	Tenant    string
	Port      int
	CreatedAt time.Time
	ExpiresAt time.Time
	// RevokedAt is set once the preview was revoked.
	RevokedAt *time.Time
	// CreatedBy is the API key that made it.
	CreatedBy Caller
}

// Live reports whether the preview still lets requests through at now:
// not revoked and not expired (the sandbox's state is checked apart).
func (p Preview) Live(now time.Time) bool {
	return p.RevokedAt == nil && now.Before(p.ExpiresAt)
}

// NewPreview is a preview to make.
type NewPreview struct {
	SandboxID string
	Tenant    string
	Port      int
	TTL       time.Duration
	CreatedBy Caller
}
