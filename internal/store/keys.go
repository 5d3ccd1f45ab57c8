package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetherhq/tether/internal/domain"
)

// keyPrefix starts every API key Tether generates, so that leaked keys are
// easy to recognise in logs and scanners. What follows it is tagged (see
// package credential); keys made before tags are 43 random characters.
const keyPrefix = domain.KeyPrefix

func hashKey(key string) []byte {
	h := sha256.Sum256([]byte(key))
	return h[:]
}

// keyIDPrefix starts every API key's id (not the key: the id is public).
const keyIDPrefix = "key_"

// keyTouchEvery is how stale a key's last_used_at may get before
// Authenticate writes it again: at most one write per key per interval.
const keyTouchEvery = time.Minute

// lockTenantSQL locks the tenant @tenant's row for the rest of the
// transaction, so that what is checked against its caps and then written
// happens one at a time.
const lockTenantSQL = `SELECT 1 FROM tenants WHERE name = @tenant FOR UPDATE`

func newKeyID() string {
	var b [10]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return keyIDPrefix + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
}

const apiKeyColumns = `id, tenant, name, created_at, last_used_at, revoked_at, manage_keys, coalesce(created_by_key_id, '')`

func scanAPIKey(row pgx.Row) (domain.APIKey, error) {
	var k domain.APIKey
	err := row.Scan(&k.ID, &k.Tenant, &k.Name, &k.CreatedAt, &k.LastUsedAt, &k.RevokedAt, &k.ManageKeys, &k.CreatedBy)
	return k, err
}

// actingKey locks the key with the given id for the rest of tx, so that a
// revocation cannot commit between the check and what the key does, and
// returns whether it may manage keys. A revoked (or unknown) key is
// UNAUTHENTICATED: the in-memory auth cache may still have let its request
// in, but key management asks the database.
func actingKey(ctx context.Context, tx pgx.Tx, tenant, id string) (manage bool, err error) {
	err = queryRow(ctx, tx, `SELECT manage_keys FROM api_keys WHERE tenant = @tenant AND id = @id AND revoked_at IS NULL FOR SHARE`,
		namedArgs{"tenant": tenant, "id": id}).Scan(&manage)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, domain.Errorf(domain.CodeUnauthenticated, "the API key making this request is revoked")
	}
	return manage, err
}

// mayManage checks, in tx, that the key by is live and has manage_keys,
// the scope minting keys and managing webhooks take (an endpoint sends
// every event of the tenant wherever its URL says).
func mayManage(ctx context.Context, tx pgx.Tx, tenant, by, what string) error {
	manage, err := actingKey(ctx, tx, tenant, by)
	if err != nil {
		return err
	}
	if !manage {
		return domain.Errorf(domain.CodeForbidden, "this API key may not %s (it lacks manage_keys); ask with a key that has it", what)
	}
	return nil
}

// MintAPIKey makes a new random API key as another key asks (POST
// /v1/keys): that key must be live in the database (not revoked, whatever
// a cache says) and have the manage_keys scope (else FORBIDDEN), and the
// tenant must be under its cap (else QUOTA_EXCEEDED). The new key records
// which key made it. It returns the key's record and the key itself.
func (s *Store) MintAPIKey(ctx context.Context, nk domain.NewAPIKey) (domain.APIKey, string, error) {
	key, err := s.newSecret(ctx, keyPrefix)
	if err != nil {
		return domain.APIKey{}, "", wrap("mint api key", err)
	}
	var k domain.APIKey
	err = s.pool.inTx(ctx, func(tx pgx.Tx) error {
		if err := mayManage(ctx, tx, nk.Tenant, nk.By, "create keys"); err != nil {
			return err
		}
		// One mint at a time per tenant, so that the cap holds.
		if _, err := exec(ctx, tx, lockTenantSQL, namedArgs{"tenant": nk.Tenant}); err != nil {
			return err
		}
		if nk.MaxKeys > 0 {
			var live int
			if err := queryRow(ctx, tx, `SELECT count(*) FROM api_keys WHERE tenant = @tenant AND revoked_at IS NULL`,
				namedArgs{"tenant": nk.Tenant}).Scan(&live); err != nil {
				return err
			}
			if live >= nk.MaxKeys {
				return domain.Errorf(domain.CodeQuotaExceeded, "tenant %s has %d API keys, its limit; revoke one first", nk.Tenant, live)
			}
		}
		var err error
		k, err = scanAPIKey(queryRow(ctx, tx, `
			INSERT INTO api_keys (key_hash, tenant, id, name, created_at, manage_keys, created_by_key_id)
			VALUES (@hash, @tenant, @id, @name, @now, @manage_keys, @by)
			RETURNING `+apiKeyColumns, namedArgs{
			"hash": hashKey(key), "tenant": nk.Tenant, "id": newKeyID(), "name": nk.Name, "now": s.Now(),
			"manage_keys": nk.ManageKeys, "by": nk.By,
		}))
		return err
	})
	if err != nil {
		return domain.APIKey{}, "", coded("mint api key", err)
	}
	return k, key, nil
}

// CreateAPIKey makes a new random API key named name for the tenant,
// creating the tenant if needed, and returns the key's record and the key
// itself (shown once: only its hash is stored).
func (s *Store) CreateAPIKey(ctx context.Context, tenant, name string) (domain.APIKey, string, error) {
	key, err := s.newSecret(ctx, keyPrefix)
	if err != nil {
		return domain.APIKey{}, "", wrap("create api key", err)
	}
	k, err := s.RegisterAPIKey(ctx, tenant, name, key)
	if err != nil {
		return domain.APIKey{}, "", err
	}
	return k, key, nil
}

// RegisterAPIKey records key, named name, for the tenant, creating the
// tenant if needed, and returns its record. It is the operator's way in
// (the command line, BOOTSTRAP_API_KEY): the key may manage keys. Registering the same key for
// the same tenant again changes nothing (not its name, and a revoked key
// stays revoked); a key that belongs to another tenant is refused.
func (s *Store) RegisterAPIKey(ctx context.Context, tenant, name, key string) (domain.APIKey, error) {
	k, _, err := s.EnsureAPIKey(ctx, tenant, name, key)
	return k, err
}

// EnsureAPIKey is RegisterAPIKey that also reports whether it registered
// the key now (true) or found it registered already (false).
func (s *Store) EnsureAPIKey(ctx context.Context, tenant, name, key string) (domain.APIKey, bool, error) {
	if tenant == "" || key == "" {
		return domain.APIKey{}, false, errors.New("store: register api key: tenant and key must not be empty")
	}
	var k domain.APIKey
	id := newKeyID()
	err := s.pool.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := exec(ctx, tx, `INSERT INTO tenants (name) VALUES (@tenant) ON CONFLICT DO NOTHING`, namedArgs{"tenant": tenant}); err != nil {
			return err
		}
		var err error
		k, err = scanAPIKey(queryRow(ctx, tx, `
			INSERT INTO api_keys (key_hash, tenant, id, name, created_at, manage_keys) VALUES (@hash, @tenant, @id, @name, @now, true)
			ON CONFLICT (key_hash) DO UPDATE SET key_hash = EXCLUDED.key_hash
			RETURNING `+apiKeyColumns, namedArgs{"hash": hashKey(key), "tenant": tenant, "id": id, "name": name, "now": s.Now()}))
		if err != nil {
			return err
		}
		if k.Tenant != tenant {
			return errors.New("the key is registered for another tenant")
		}
		return nil
	})
	if err != nil {
		return domain.APIKey{}, false, wrap("register api key", err)
	}
	return k, k.ID == id, nil // a key found registered keeps its own id
}

// authenticateSQL reads the live API key whose hash is @hash.
var authenticateSQL = `SELECT ` + apiKeyColumns + ` FROM api_keys WHERE key_hash = @hash AND revoked_at IS NULL`

// Authenticate returns the API key's record, or ErrNotFound for a key
// Tether does not know or one that was revoked. It records the key's use
// when its last_used_at is a minute old or more: most calls write nothing.
func (s *Store) Authenticate(ctx context.Context, key string) (domain.APIKey, error) {
	k, err := scanAPIKey(queryRow(ctx, s.pool, authenticateSQL, namedArgs{"hash": hashKey(key)}))
	if errors.Is(err, pgx.ErrNoRows) {
		return domain.APIKey{}, fmt.Errorf("store: authenticate: %w", domain.ErrNotFound)
	}
	if err != nil {
		return domain.APIKey{}, wrap("authenticate", err)
	}
	if now := s.Now(); k.LastUsedAt == nil || now.Sub(*k.LastUsedAt) >= keyTouchEvery {
		// Conditional, so that concurrent requests write it once.
		if _, err := exec(ctx, s.pool, `UPDATE api_keys SET last_used_at = @now
			WHERE key_hash = @hash AND (last_used_at IS NULL OR last_used_at <= @stale)`,
			namedArgs{"hash": hashKey(key), "now": now, "stale": now.Add(-keyTouchEvery)}); err != nil {
			return domain.APIKey{}, wrap("authenticate: record use", err)
		}
	}
	return k, nil
}

// APIKeys returns the tenant's API keys, revoked ones included, oldest
// first.
func (s *Store) APIKeys(ctx context.Context, tenant string) ([]domain.APIKey, error) {
	rows, err := query(ctx, s.pool, `SELECT `+apiKeyColumns+` FROM api_keys WHERE tenant = @tenant ORDER BY created_at, id`,
		namedArgs{"tenant": tenant})
	if err != nil {
		return nil, wrap("api keys", err)
	}
	keys, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (domain.APIKey, error) { return scanAPIKey(r) })
	if err != nil {
		return nil, wrap("api keys", err)
	}
	return keys, nil
}

// RevokeAPIKey revokes the tenant's API key with the given id, as the key
// by asks, and returns its record; revoking a revoked key changes nothing.
// The asking key must be live in the database (else UNAUTHENTICATED) and
// have manage_keys unless it revokes itself (else FORBIDDEN). A key of
// another tenant is ErrNotFound.
func (s *Store) RevokeAPIKey(ctx context.Context, tenant, id, by string) (domain.APIKey, error) {
	var k domain.APIKey
	err := s.pool.inTx(ctx, func(tx pgx.Tx) error {
		manage, err := actingKey(ctx, tx, tenant, by)
		if err != nil {
			return err
		}
		if !manage && id != by {
			return domain.Errorf(domain.CodeForbidden, "this API key may revoke only itself (it lacks manage_keys)")
		}
		k, err = scanAPIKey(queryRow(ctx, tx, `
			UPDATE api_keys SET revoked_at = coalesce(revoked_at, @now)
			WHERE tenant = @tenant AND id = @id
			RETURNING `+apiKeyColumns, namedArgs{"tenant": tenant, "id": id, "now": s.Now()}))
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("store: revoke api key: %w", domain.ErrNotFound)
		}
		return err
	})
	if err != nil {
		return domain.APIKey{}, coded("revoke api key", err)
	}
	return k, nil
}

// TenantUsage returns the tenant's live sandboxes and its quota overrides.
// An unknown tenant has none of either.
func (s *Store) TenantUsage(ctx context.Context, tenant string) (domain.TenantUsage, error) {
	var u domain.TenantUsage
	err := queryRow(ctx, s.pool, `
		SELECT t.max_live_sandboxes, t.creates_per_minute,
			(SELECT count(*) FROM sandboxes s WHERE s.tenant = t.name AND s.state IN `+liveStates+`)
		FROM tenants t WHERE t.name = @tenant`, namedArgs{"tenant": tenant}).Scan(&u.MaxLive, &u.CreatesPerMinute, &u.Live)
	if errors.Is(err, pgx.ErrNoRows) {
		return u, nil
	}
	if err != nil {
		return u, wrap("tenant usage", err)
	}
	return u, nil
}
