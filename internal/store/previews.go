package store

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/tetherhq/tether/internal/domain"
)

// Preview tokens and ids. A token is 32 random bytes and a tag (see
// package credential) behind a prefix that scanners recognise; only its
// SHA-256 is stored, so a token cannot be read back, only checked.
const (
	previewTokenPrefix = domain.PreviewTokenPrefix
	previewIDPrefix    = domain.PreviewIDPrefix
)

func newPreviewID() string {
	var b [10]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return previewIDPrefix + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
}

const previewColumns = `id, sandbox_id, tenant, port, created_at, expires_at, revoked_at, coalesce(key_id, ''), coalesce(key_name, '')`

func scanPreview(row pgx.Row) (domain.Preview, error) {
	var p domain.Preview
	err := row.Scan(&p.ID, &p.SandboxID, &p.Tenant, &p.Port, &p.CreatedAt, &p.ExpiresAt, &p.RevokedAt,
		&p.CreatedBy.KeyID, &p.CreatedBy.KeyName)
	return p, err
}

// CreatePreview makes a preview of the tenant's sandbox np.SandboxID and
// returns it with its token, which is shown only now. A sandbox the
// tenant does not have is ErrNotFound. The caller checks the sandbox's
// state; a preview of a sandbox that ends later stops working then.
func (s *Store) CreatePreview(ctx context.Context, np domain.NewPreview) (domain.Preview, string, error) {
	token, err := s.newSecret(ctx, previewTokenPrefix)
	if err != nil {
		return domain.Preview{}, "", wrap("create preview", err)
	}
	now := s.Now()
	p, err := scanPreview(queryRow(ctx, s.pool, `
		INSERT INTO sandbox_previews (id, sandbox_id, tenant, port, token_hash, created_at, expires_at, key_id, key_name)
		SELECT @id, s.id, s.tenant, @port, @hash, @now, @expires, @key_id, @key_name
		FROM sandboxes s WHERE s.id = @sandbox AND s.tenant = @tenant
		RETURNING `+previewColumns, namedArgs{
		"id": newPreviewID(), "port": np.Port, "hash": hashKey(token), "now": now, "expires": now.Add(np.TTL),
		"key_id": nullable(np.CreatedBy.KeyID), "key_name": nullable(np.CreatedBy.KeyName),
		"sandbox": np.SandboxID, "tenant": np.Tenant,
	}))
	if err != nil {
		return domain.Preview{}, "", wrap("create preview", err)
	}
	return p, token, nil
}

// SandboxPreviews returns the previews of the tenant's sandbox, oldest
// first, revoked and expired ones included. The caller checks the sandbox
// belongs to the tenant first.
func (s *Store) SandboxPreviews(ctx context.Context, tenant, sandboxID string) ([]domain.Preview, error) {
	rows, err := query(ctx, s.pool, `SELECT `+previewColumns+` FROM sandbox_previews
		WHERE sandbox_id = @sandbox AND tenant = @tenant ORDER BY sandbox_id, created_at, id`,
		namedArgs{"sandbox": sandboxID, "tenant": tenant})
	if err != nil {
		return nil, wrap("sandbox previews", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (domain.Preview, error) { return scanPreview(r) })
	if err != nil {
		return nil, wrap("sandbox previews", err)
	}
	return out, nil
}

// SandboxPreview returns the preview id of the tenant's sandbox, live or
// not. Another tenant's, or another sandbox's, is ErrNotFound.
func (s *Store) SandboxPreview(ctx context.Context, tenant, sandboxID, id string) (domain.Preview, error) {
	p, err := scanPreview(queryRow(ctx, s.pool, `SELECT `+previewColumns+` FROM sandbox_previews
		WHERE tenant = @tenant AND sandbox_id = @sandbox AND id = @id`,
		namedArgs{"tenant": tenant, "sandbox": sandboxID, "id": id}))
	if err != nil {
		return domain.Preview{}, wrap("sandbox preview", err)
	}
	return p, nil
}

// RevokePreview revokes the preview id of the tenant's sandbox and
// returns it; revoking a revoked preview changes nothing. Another
// tenant's, or another sandbox's, is ErrNotFound.
func (s *Store) RevokePreview(ctx context.Context, tenant, sandboxID, id string) (domain.Preview, error) {
	p, err := scanPreview(queryRow(ctx, s.pool, `
		UPDATE sandbox_previews SET revoked_at = coalesce(revoked_at, @now)
		WHERE tenant = @tenant AND sandbox_id = @sandbox AND id = @id
		RETURNING `+previewColumns, namedArgs{"tenant": tenant, "sandbox": sandboxID, "id": id, "now": s.Now()}))
	if err != nil {
		return domain.Preview{}, wrap("revoke preview", err)
	}
	return p, nil
}

// PreviewByToken returns the preview whose token is token, live or not
// (the caller checks Live and the sandbox); an unknown token is
// ErrNotFound.
func (s *Store) PreviewByToken(ctx context.Context, token string) (domain.Preview, error) {
	p, err := scanPreview(queryRow(ctx, s.pool, `SELECT `+previewColumns+` FROM sandbox_previews WHERE token_hash = @hash`,
		namedArgs{"hash": hashKey(token)}))
	if errors.Is(err, pgx.ErrNoRows) {
		return domain.Preview{}, fmt.Errorf("store: preview by token: %w", domain.ErrNotFound)
	}
	if err != nil {
		return domain.Preview{}, wrap("preview by token", err)
	}
	return p, nil
}
