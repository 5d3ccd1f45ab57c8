package store_test

import (
	"crypto/sha256"
	"encoding/binary"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/credential"
	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/store"
)

// TestSecretsAreTagged: the keys and preview tokens the store makes carry
// the installation's tag (so that the API tells them from guesses without
// a query), under one Tagger for the life of the database; keys made
// before tags, and keys an operator chose, still authenticate.
func TestSecretsAreTagged(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tg, err := b.st.Credentials(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, created, err := b.st.CreateAPIKey(b.ctx, "acme", "ci")
	if err != nil {
		t.Fatal(err)
	}
	keys, err := b.st.APIKeys(b.ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	_, minted, err := b.st.MintAPIKey(b.ctx, domain.NewAPIKey{Tenant: "acme", Name: "bot", By: keys[0].ID})
	if err != nil {
		t.Fatal(err)
	}
	sb := b.create(t) // the store does not look at its state
	_, token, err := b.st.CreatePreview(b.ctx, domain.NewPreview{SandboxID: sb.ID, Tenant: "acme", Port: 8080, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{created, minted} {
		if !strings.HasPrefix(k, domain.KeyPrefix) || tg.Check(domain.KeyPrefix, k) != credential.Genuine {
			t.Errorf("key %q is not tagged", k)
		}
	}
	if tg.Check(domain.PreviewTokenPrefix, token) != credential.Genuine || !domain.ValidPreviewToken(token) {
		t.Errorf("preview token %q is not tagged", token)
	}
	// Another Store over the same database tags alike.
	again, err := store.New(b.st.Pool()).Credentials(b.ctx)
	if err != nil || again.Check(domain.KeyPrefix, created) != credential.Genuine {
		t.Errorf("another replica's Tagger: %v", err)
	}

	old := domain.KeyPrefix + strings.Repeat("q", credential.UntaggedLen)
	if _, err := b.st.RegisterAPIKey(b.ctx, "acme", "old", old); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{old, "key-acme", created, minted} {
		if _, err := b.st.Authenticate(b.ctx, k); err != nil {
			t.Errorf("Authenticate(%q) = %v", k, err)
		}
	}
}

// TestLiveKeyHashes: the hash prefixes of exactly the keys that are not
// revoked.
func TestLiveKeyHashes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec, key, err := b.st.CreateAPIKey(b.ctx, "acme", "ci")
	if err != nil {
		t.Fatal(err)
	}
	prefix := func(k string) uint64 { h := sha256.Sum256([]byte(k)); return binary.BigEndian.Uint64(h[:8]) }
	got, err := b.st.LiveKeyHashes(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{key, "key-acme", "key-other"} {
		if !slices.Contains(got, prefix(k)) {
			t.Errorf("live key %q is missing from %x", k, got)
		}
	}
	if len(got) != 3 {
		t.Errorf("%d hashes; want 3", len(got))
	}
	if _, err := b.st.RevokeAPIKey(b.ctx, "acme", rec.ID, rec.ID); err != nil {
		t.Fatal(err)
	}
	if got, err = b.st.LiveKeyHashes(b.ctx); err != nil || slices.Contains(got, prefix(key)) || len(got) != 2 {
		t.Errorf("after the revocation: %x, %v", got, err)
	}
}
