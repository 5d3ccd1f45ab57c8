package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tetherhq/tether/internal/domain"
)

// MaxSecretsPerTenant bounds a tenant's secrets.
const MaxSecretsPerTenant = 500

// PutSecret stores the tenant's secret name, sealed (package secretbox),
// replacing its value if it exists; created tells which. A tenant that
// holds MaxSecretsPerTenant secrets gets QUOTA_EXCEEDED for a new one.
func (s *Store) PutSecret(ctx context.Context, tenant, name string, sealed []byte, by domain.Caller) (domain.Secret, bool, error) {
	now := s.Now()
	var (
		sec     = domain.Secret{Tenant: tenant, Name: name}
		created bool
	)
	err := queryRow(ctx, s.pool, `
		INSERT INTO secrets (tenant, name, sealed, created_at, updated_at, key_id)
		SELECT @tenant, @name, @sealed, @now, @now, @key_id
		WHERE EXISTS (SELECT 1 FROM secrets WHERE tenant = @tenant AND name = @name)
		   OR (SELECT count(*) FROM secrets WHERE tenant = @tenant) < @max
		ON CONFLICT (tenant, name) DO UPDATE SET sealed = excluded.sealed, updated_at = excluded.updated_at, key_id = excluded.key_id
		RETURNING created_at, updated_at, coalesce(key_id, ''), xmax = 0`,
		namedArgs{"tenant": tenant, "name": name, "sealed": sealed, "now": now, "key_id": nullable(by.KeyID), "max": MaxSecretsPerTenant},
	).Scan(&sec.CreatedAt, &sec.UpdatedAt, &sec.UpdatedBy, &created)
	if errors.Is(err, pgx.ErrNoRows) {
		return sec, false, domain.Errorf(domain.CodeQuotaExceeded, "the tenant holds %d secrets, the most it may", MaxSecretsPerTenant)
	}
	if err != nil {
		return sec, false, wrap("put secret", err)
	}
	return sec, created, nil
}

// Secrets lists the tenant's secrets by name, without their values.
func (s *Store) Secrets(ctx context.Context, tenant string) ([]domain.Secret, error) {
	rows, err := query(ctx, s.pool, `
		SELECT tenant, name, created_at, updated_at, coalesce(key_id, '') FROM secrets WHERE tenant = @tenant ORDER BY name`,
		namedArgs{"tenant": tenant})
	if err != nil {
		return nil, wrap("list secrets", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (domain.Secret, error) {
		var sec domain.Secret
		err := r.Scan(&sec.Tenant, &sec.Name, &sec.CreatedAt, &sec.UpdatedAt, &sec.UpdatedBy)
		return sec, err
	})
	if err != nil {
		return nil, wrap("list secrets", err)
	}
	return out, nil
}

// DeleteSecret deletes the tenant's secret name (ErrNotFound if it has
// none). Credentials that name it stop working when the egress proxies
// next reload them (within a second).
func (s *Store) DeleteSecret(ctx context.Context, tenant, name string) error {
	tag, err := exec(ctx, s.pool, `DELETE FROM secrets WHERE tenant = @tenant AND name = @name`,
		namedArgs{"tenant": tenant, "name": name})
	if err != nil {
		return wrap("delete secret", err)
	}
	if tag.RowsAffected() == 0 {
		return wrap("delete secret", domain.ErrNotFound)
	}
	return nil
}

// SealedSecrets returns the sealed values of those of the tenant's
// secrets named, by name; a name it lacks is absent.
func (s *Store) SealedSecrets(ctx context.Context, tenant string, names []string) (map[string][]byte, error) {
	rows, err := query(ctx, s.pool, `SELECT name, sealed FROM secrets WHERE tenant = @tenant AND name = ANY(@names)`,
		namedArgs{"tenant": tenant, "names": names})
	if err != nil {
		return nil, wrap("sealed secrets", err)
	}
	out := make(map[string][]byte, len(names))
	var (
		name   string
		sealed []byte
	)
	_, err = pgx.ForEachRow(rows, []any{&name, &sealed}, func() error {
		out[name] = sealed
		return nil
	})
	if err != nil {
		return nil, wrap("sealed secrets", err)
	}
	return out, nil
}

// networkSelect reads sandboxes' network rules: an edit's, else the
// create's params, and the deadline their credentials hold until.
const networkSelect = `
	SELECT s.id, s.tenant, s.provider, s.state, coalesce(s.params->>'network', ''),
		coalesce(n.allow, s.params->'allow', '[]'), coalesce(n.credentials, s.params->'credentials', '[]'),
		n.sandbox_id IS NOT NULL, coalesce(n.updated_at, s.created_at), coalesce(n.key_id, ''),
		least(s.expires_at, o.expires_at), coalesce(n.policies, s.params->'policies', '[]'),
		coalesce((SELECT jsonb_agg(jsonb_build_object('name', p.name, 'allow', p.allow, 'credentials', p.credentials) ORDER BY p.name)
			FROM network_policies p
			WHERE p.tenant = s.tenant AND coalesce(n.policies, s.params->'policies', '[]') ? p.name), '[]')
	FROM sandboxes s
	LEFT JOIN sandbox_networks n ON n.sandbox_id = s.id
	LEFT JOIN owners o ON o.tenant = s.tenant AND o.name = s.owner`

func scanNetwork(row pgx.Row) (domain.SandboxNetwork, error) {
	var (
		n                                domain.SandboxNetwork
		allow, creds, policies, attached []byte
	)
	if err := row.Scan(&n.SandboxID, &n.Tenant, &n.Provider, &n.State, &n.Mode, &allow, &creds, &n.Edited, &n.UpdatedAt,
		&n.UpdatedBy.KeyID, &n.LiveUntil, &policies, &attached); err != nil {
		return n, err
	}
	if json.Unmarshal(policies, &n.Policies) != nil {
		n.Policies = nil
	}
	if json.Unmarshal(attached, &n.Attached) != nil {
		n.Attached = nil
	}
	// A create's params were checked by its provider; a value of another
	// shape (a provider without allow lists) reads as none.
	if json.Unmarshal(allow, &n.Allow) != nil {
		n.Allow = nil
	}
	if json.Unmarshal(creds, &n.Credentials) != nil {
		n.Credentials = nil
	}
	return n, nil
}

// SandboxNetwork returns the network rules of the tenant's sandbox id.
func (s *Store) SandboxNetwork(ctx context.Context, tenant, id string) (domain.SandboxNetwork, error) {
	n, err := scanNetwork(queryRow(ctx, s.pool, networkSelect+` WHERE s.id = @id AND s.tenant = @tenant`,
		namedArgs{"id": id, "tenant": tenant}))
	if err != nil {
		return n, wrap("sandbox network", err)
	}
	return n, nil
}

// SandboxNetworks returns the network rules of the sandboxes ids (any
// tenant's): what the egress proxy reloads. An id the registry lacks is
// absent.
func (s *Store) SandboxNetworks(ctx context.Context, ids []string) ([]domain.SandboxNetwork, error) {
	rows, err := query(ctx, s.pool, networkSelect+` WHERE s.id = ANY(@ids)`, namedArgs{"ids": ids})
	if err != nil {
		return nil, wrap("sandbox networks", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (domain.SandboxNetwork, error) { return scanNetwork(r) })
	if err != nil {
		return nil, wrap("sandbox networks", err)
	}
	return out, nil
}

// SetSandboxNetwork replaces the rules of the tenant's sandbox, which must
// be live (STATE_CONFLICT otherwise), records the edit in its activity
// (kind network_update) in the same transaction, and announces it
// (domain.NetworkChanged) so that every egress proxy reloads them.
func (s *Store) SetSandboxNetwork(ctx context.Context, e domain.NetworkEdit) (domain.SandboxNetwork, error) {
	if e.Allow == nil {
		e.Allow = []string{}
	}
	allow, err := json.Marshal(e.Allow)
	if err != nil {
		return domain.SandboxNetwork{}, fmt.Errorf("store: set sandbox network: %w", err)
	}
	var creds, policies []byte
	if e.Credentials != nil {
		if creds, err = json.Marshal(e.Credentials); err != nil {
			return domain.SandboxNetwork{}, fmt.Errorf("store: set sandbox network: %w", err)
		}
	}
	if e.Policies != nil {
		if policies, err = json.Marshal(e.Policies); err != nil {
			return domain.SandboxNetwork{}, fmt.Errorf("store: set sandbox network: %w", err)
		}
	}
	var (
		state   domain.State
		written bool
	)
	err = queryRow(ctx, s.pool, `
		WITH sb AS (
			SELECT id, tenant, state, params FROM sandboxes WHERE id = @id AND tenant = @tenant FOR SHARE
		), edit AS (
			INSERT INTO sandbox_networks (sandbox_id, allow, credentials, policies, updated_at, key_id)
			SELECT sb.id, @allow, coalesce(@creds::jsonb, n.credentials, sb.params->'credentials', '[]'),
				coalesce(@policies::jsonb, n.policies, sb.params->'policies', '[]'), @now, @key_id
			FROM sb LEFT JOIN sandbox_networks n ON n.sandbox_id = sb.id
			WHERE sb.state NOT IN ('cancelled', 'terminated', 'failed')
			ON CONFLICT (sandbox_id) DO UPDATE
				-- The row as it is now (an edit that committed while this
				-- one waited included), not as the statement's snapshot
				-- read it: an edit that keeps the credentials keeps the
				-- latest ones.
				SET allow = excluded.allow, updated_at = excluded.updated_at, key_id = excluded.key_id,
					credentials = CASE WHEN @creds::jsonb IS NULL THEN sandbox_networks.credentials ELSE excluded.credentials END,
					policies = CASE WHEN @policies::jsonb IS NULL THEN sandbox_networks.policies ELSE excluded.policies END
			RETURNING sandbox_id
		), audit AS (
			INSERT INTO sandbox_activity (sandbox_id, tenant, at, key_id, key_name, kind, target, duration_ms, timed_out, oom_killed)
			SELECT sb.id, sb.tenant, @now, @key_id, @key_name, 'network_update', @target, 0, false, false
			FROM sb JOIN edit ON edit.sandbox_id = sb.id
		)
		SELECT sb.state, EXISTS (SELECT 1 FROM edit) FROM sb`,
		namedArgs{"id": e.SandboxID, "tenant": e.Tenant, "allow": allow, "creds": creds, "policies": policies, "now": s.Now(),
			"key_id": nullable(e.By.KeyID), "key_name": nullable(e.By.KeyName),
			"target": truncateUTF8(editRecord(e), domain.MaxActivityTarget)},
	).Scan(&state, &written)
	if err != nil {
		return domain.SandboxNetwork{}, wrap("set sandbox network", err)
	}
	if !written {
		return domain.SandboxNetwork{}, domain.StateConflict(e.SandboxID, state, "change its network")
	}
	if s.announcer != nil {
		s.announcer.Announce(domain.Change{ID: e.SandboxID, State: domain.NetworkChanged})
	}
	return s.SandboxNetwork(ctx, e.Tenant, e.SandboxID)
}

// editRecord is what the activity keeps of an edit: the new allow list
// and, if the edit set them, the credentials (their secrets by name) and
// the policies, as JSON.
func editRecord(e domain.NetworkEdit) string {
	rec := struct {
		Allow       []string                    `json:"allow"`
		Credentials *[]domain.NetworkCredential `json:"credentials,omitempty"`
		Policies    *[]string                   `json:"policies,omitempty"`
	}{Allow: e.Allow}
	if e.Credentials != nil {
		rec.Credentials = &e.Credentials
	}
	if e.Policies != nil {
		rec.Policies = &e.Policies
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return ""
	}
	return string(b)
}

// PutNetworkPolicy stores the tenant's network policy p, replacing it if
// it exists (created tells which), and announces an edit
// (domain.NetworkChanged) of every live sandbox it is attached to.
func (s *Store) PutNetworkPolicy(ctx context.Context, p domain.NetworkPolicy, by domain.Caller) (domain.NetworkPolicy, bool, error) {
	allow, err1 := json.Marshal(p.Allow)
	creds, err2 := json.Marshal(p.Credentials)
	if err := errors.Join(err1, err2); err != nil {
		return p, false, fmt.Errorf("store: put network policy: %w", err)
	}
	var created bool
	err := queryRow(ctx, s.pool, `
		INSERT INTO network_policies (tenant, name, allow, credentials, created_at, updated_at, key_id)
		SELECT @tenant, @name, @allow, @creds, @now, @now, @key_id
		WHERE EXISTS (SELECT 1 FROM network_policies WHERE tenant = @tenant AND name = @name)
		   OR (SELECT count(*) FROM network_policies WHERE tenant = @tenant) < @max
		ON CONFLICT (tenant, name) DO UPDATE
			SET allow = excluded.allow, credentials = excluded.credentials, updated_at = excluded.updated_at, key_id = excluded.key_id
		RETURNING created_at, updated_at, coalesce(key_id, ''), xmax = 0`,
		namedArgs{"tenant": p.Tenant, "name": p.Name, "allow": allow, "creds": creds, "now": s.Now(),
			"key_id": nullable(by.KeyID), "max": MaxNetworkPoliciesPerTenant},
	).Scan(&p.CreatedAt, &p.UpdatedAt, &p.UpdatedBy, &created)
	if errors.Is(err, pgx.ErrNoRows) {
		return p, false, domain.Errorf(domain.CodeQuotaExceeded, "the tenant holds %d network policies, the most it may", MaxNetworkPoliciesPerTenant)
	}
	if err != nil {
		return p, false, wrap("put network policy", err)
	}
	s.announcePolicy(ctx, p.Tenant, p.Name)
	return p, created, nil
}

// MaxNetworkPoliciesPerTenant bounds a tenant's network policies.
const MaxNetworkPoliciesPerTenant = 200

const policyColumns = `tenant, name, allow, credentials, created_at, updated_at, coalesce(key_id, '')`

func scanPolicy(row pgx.Row) (domain.NetworkPolicy, error) {
	var (
		p            domain.NetworkPolicy
		allow, creds []byte
	)
	if err := row.Scan(&p.Tenant, &p.Name, &allow, &creds, &p.CreatedAt, &p.UpdatedAt, &p.UpdatedBy); err != nil {
		return p, err
	}
	return p, errors.Join(json.Unmarshal(allow, &p.Allow), json.Unmarshal(creds, &p.Credentials))
}

// NetworkPolicies lists the tenant's network policies by name.
func (s *Store) NetworkPolicies(ctx context.Context, tenant string) ([]domain.NetworkPolicy, error) {
	rows, err := query(ctx, s.pool, `SELECT `+policyColumns+` FROM network_policies WHERE tenant = @tenant ORDER BY name`,
		namedArgs{"tenant": tenant})
	if err != nil {
		return nil, wrap("list network policies", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (domain.NetworkPolicy, error) { return scanPolicy(r) })
	if err != nil {
		return nil, wrap("list network policies", err)
	}
	return out, nil
}

// NetworkPolicy returns the tenant's network policy name.
func (s *Store) NetworkPolicy(ctx context.Context, tenant, name string) (domain.NetworkPolicy, error) {
	p, err := scanPolicy(queryRow(ctx, s.pool, `SELECT `+policyColumns+` FROM network_policies WHERE tenant = @tenant AND name = @name`,
		namedArgs{"tenant": tenant, "name": name}))
	if err != nil {
		return p, wrap("network policy", err)
	}
	return p, nil
}

// DeleteNetworkPolicy deletes the tenant's network policy name
// (ErrNotFound if it has none); the sandboxes it was attached to lose its
// rules (their own stay), and are announced.
func (s *Store) DeleteNetworkPolicy(ctx context.Context, tenant, name string) error {
	tag, err := exec(ctx, s.pool, `DELETE FROM network_policies WHERE tenant = @tenant AND name = @name`,
		namedArgs{"tenant": tenant, "name": name})
	if err != nil {
		return wrap("delete network policy", err)
	}
	if tag.RowsAffected() == 0 {
		return wrap("delete network policy", domain.ErrNotFound)
	}
	s.announcePolicy(ctx, tenant, name)
	return nil
}

// announcePolicy announces an edit of every live sandbox of the tenant's
// that the policy name is attached to. A failure to find them is not the
// caller's: the proxies' periodic reload picks the change up.
func (s *Store) announcePolicy(ctx context.Context, tenant, name string) {
	if s.announcer == nil {
		return
	}
	rows, err := query(ctx, s.pool, `
		SELECT s.id FROM sandboxes s LEFT JOIN sandbox_networks n ON n.sandbox_id = s.id
		WHERE s.tenant = @tenant AND s.state NOT IN ('cancelled', 'terminated', 'failed')
		  AND coalesce(n.policies, s.params->'policies', '[]') ? @name`, namedArgs{"tenant": tenant, "name": name})
	if err != nil {
		return
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return
	}
	changes := make([]domain.Change, len(ids))
	for i, id := range ids {
		changes[i] = domain.Change{ID: id, State: domain.NetworkChanged}
	}
	s.announcer.Announce(changes...)
}
