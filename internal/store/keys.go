package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tetherhq/tether/internal/sandbox"
)

// keyPrefix starts every API key Tether generates, so that leaked keys are
// easy to recognise in logs and scanners.
const keyPrefix = "tk_"

func hashKey(key string) []byte {
	h := sha256.Sum256([]byte(key))
	return h[:]
}

// CreateAPIKey makes a new random API key for the tenant, creating the tenant
// if needed, and returns the key. Only its hash is stored.
func (s *Store) CreateAPIKey(ctx context.Context, tenant string) (string, error) {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	key := keyPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	if err := s.RegisterAPIKey(ctx, tenant, key); err != nil {
		return "", err
	}
	return key, nil
}

// RegisterAPIKey records key for the tenant, creating the tenant if needed.
// Registering the same key for the same tenant again changes nothing; a key
// that belongs to another tenant is refused.
func (s *Store) RegisterAPIKey(ctx context.Context, tenant, key string) error {
	if tenant == "" || key == "" {
		return errors.New("store: register api key: tenant and key must not be empty")
	}
	err := s.pool.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO tenants (name) VALUES ($1) ON CONFLICT DO NOTHING`, tenant); err != nil {
			return err
		}
		var owner string
		err := tx.QueryRow(ctx, `
			INSERT INTO api_keys (key_hash, tenant) VALUES ($1, $2)
			ON CONFLICT (key_hash) DO UPDATE SET key_hash = EXCLUDED.key_hash
			RETURNING tenant`, hashKey(key), tenant).Scan(&owner)
		if err != nil {
			return err
		}
		if owner != tenant {
			return errors.New("the key is registered for another tenant")
		}
		return nil
	})
	if err != nil {
		return wrap("register api key", err)
	}
	return nil
}

// Authenticate returns the tenant the API key belongs to, or ErrNotFound.
func (s *Store) Authenticate(ctx context.Context, key string) (string, error) {
	var tenant string
	err := s.pool.QueryRow(ctx, `SELECT tenant FROM api_keys WHERE key_hash = $1`, hashKey(key)).Scan(&tenant)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("store: authenticate: %w", sandbox.ErrNotFound)
	}
	if err != nil {
		return "", wrap("authenticate", err)
	}
	return tenant, nil
}

// TenantUsage returns the tenant's live sandboxes and its quota overrides.
// An unknown tenant has none of either.
func (s *Store) TenantUsage(ctx context.Context, tenant string) (sandbox.TenantUsage, error) {
	var u sandbox.TenantUsage
	err := s.pool.QueryRow(ctx, `
		SELECT t.max_live_sandboxes, t.creates_per_minute,
			(SELECT count(*) FROM sandboxes s WHERE s.tenant = t.name AND s.state IN `+liveStates+`)
		FROM tenants t WHERE t.name = $1`, tenant).Scan(&u.MaxLive, &u.CreatesPerMinute, &u.Live)
	if errors.Is(err, pgx.ErrNoRows) {
		return u, nil
	}
	if err != nil {
		return u, wrap("tenant usage", err)
	}
	return u, nil
}
