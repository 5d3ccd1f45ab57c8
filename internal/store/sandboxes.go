package store

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tetherhq/tether/internal/domain"
)

// scanSandbox reads a row of sandboxColumns (after extra columns, each a
// *domain.State) from a pgx.Row or pgx.Rows; from queryRow's and
// pgx.Rows' rows by the fast path (rawscan.go) where it can.
func scanSandbox(row pgx.Row, extra ...any) (domain.Sandbox, error) {
	switch r := row.(type) {
	case firstRow:
		var sb domain.Sandbox
		err := r.read(func(rows pgx.Rows) error {
			var err error
			sb, err = scanRaw(rows, extra)
			return err
		})
		if err != nil {
			return domain.Sandbox{}, err
		}
		return sb, nil
	case rawRow:
		return scanRaw(r, extra)
	}
	return scanRow(row, extra)
}

func scanRaw(r rawRow, extra []any) (domain.Sandbox, error) {
	if sb, ok, err := rawSandbox(r, extra); ok {
		return sb, err
	}
	return scanRow(r, extra)
}

// scanRow is scanSandbox through pgx's Scan.
func scanRow(row pgx.Row, extra []any) (domain.Sandbox, error) {
	var held [len(sandboxTable)]holder
	dest := append(make([]any, 0, len(extra)+len(sandboxTable)), extra...)
	for i, c := range sandboxTable {
		dest = append(dest, held[i].dest(c.kind))
	}
	if err := row.Scan(dest...); err != nil {
		return domain.Sandbox{}, err
	}
	var values [len(sandboxTable)]colValue
	for i, c := range sandboxTable {
		values[i] = held[i].value(c.kind)
	}
	return fill(&values)
}

// collectSandboxes reads every row of a query of sandboxColumns.
func collectSandboxes(rows pgx.Rows) ([]domain.Sandbox, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (domain.Sandbox, error) { return scanSandbox(r) })
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// insertSandboxSQL inserts a requested sandbox and its first event.
var insertSandboxSQL = `
	WITH ins AS (
		INSERT INTO sandboxes AS s (id, tenant, state, provider, owner, labels, env, setup, params,
			created_at, updated_at, expires_at, create_deadline, on_end, from_snapshot, node)
		VALUES (@id, @tenant, 'requested', @provider, @owner, @labels, @env, @setup, @params,
			@now, @now, @expires_at, @create_deadline, @on_end::text, @from_snapshot::text, @node::text)
		RETURNING *
	), ev AS (
		INSERT INTO sandbox_events (sandbox_id, tenant, at, from_state, to_state, reason, actor, message, actor_key_id, actor_key_name)
		SELECT id, tenant, @now, NULL, 'requested', 'requested', 'client', 'sandbox requested', @key_id::text, @key_name::text FROM ins
	)
	SELECT ` + sandboxColumns + ` FROM ins s`

// newSandboxRow is a sandbox to insert in state requested. Batched ones
// have no owner. Their timestamps are taken when their statement runs, not
// when they queued for it: executors' quick claims look for new requests
// by created_at.
type newSandboxRow struct {
	id, tenant, provider, owner string
	labels, env, params         []byte
	setup                       string
	ttl, createTimeout          time.Duration
	by                          domain.Caller
	// onEnd, fromSnapshot and node: only unbatched creates have them.
	onEnd, fromSnapshot, node string
}

// newRow is the row of the sandbox p asks for, with a fresh id unless p
// names one.
func newRow(p domain.CreateParams) (newSandboxRow, error) {
	labels, err := json.Marshal(nonNil(p.Labels))
	if err != nil {
		return newSandboxRow{}, err
	}
	env, err := json.Marshal(nonNil(p.Env))
	if err != nil {
		return newSandboxRow{}, err
	}
	params := p.Params
	if len(params) == 0 {
		params = json.RawMessage(`{}`)
	}
	id := p.ID
	if id == "" {
		id = domain.NewID()
	}
	return newSandboxRow{
		id: id, tenant: p.Tenant, provider: p.Provider, owner: p.Owner, labels: labels, env: env, setup: p.Setup, params: params,
		ttl: p.TTL, createTimeout: p.CreateTimeout, by: p.Caller,
		onEnd: p.OnEnd, fromSnapshot: p.FromSnapshot, node: p.Node,
	}, nil
}

// insertSandbox inserts r, created now, with its first event.
func insertSandbox(ctx context.Context, q querier, r newSandboxRow, now time.Time) (domain.Sandbox, error) {
	return scanSandbox(querySandbox(ctx, q, insertSandboxSQL, namedArgs{
		"id": r.id, "tenant": r.tenant, "provider": r.provider, "owner": nullable(r.owner),
		"labels": r.labels, "env": r.env, "setup": r.setup, "params": r.params,
		"now": now, "expires_at": now.Add(r.ttl), "create_deadline": now.Add(r.createTimeout),
		"key_id": nullable(r.by.KeyID), "key_name": nullable(r.by.KeyName),
		"on_end": nullable(r.onEnd), "from_snapshot": nullable(r.fromSnapshot), "node": nullable(r.node),
	}))
}

// insertSandboxesSQL is insertSandboxSQL for many ownerless sandboxes at
// once, given as arrays of their columns.
var insertSandboxesSQL = `
	WITH ins AS (
		INSERT INTO sandboxes AS s (id, tenant, state, provider, labels, env, setup, params,
			created_at, updated_at, expires_at, create_deadline)
		SELECT id, tenant, 'requested', provider, labels, env, setup, params, at, at, expires, deadline
		FROM unnest(@ids::text[], @tenants::text[], @providers::text[], @labels::jsonb[], @envs::jsonb[],
			@setups::text[], @params::jsonb[], @created_at::timestamptz[], @expires_at::timestamptz[],
			@create_deadlines::timestamptz[])
			AS n(id, tenant, provider, labels, env, setup, params, at, expires, deadline)
		ORDER BY id
		RETURNING *
	), ev AS (
		INSERT INTO sandbox_events (sandbox_id, tenant, at, from_state, to_state, reason, actor, message, actor_key_id, actor_key_name)
		SELECT ins.id, ins.tenant, ins.created_at, NULL, 'requested', 'requested', 'client', 'sandbox requested', k.key_id, k.key_name
		FROM ins JOIN unnest(@ids::text[], @key_ids::text[], @key_names::text[]) AS k(id, key_id, key_name) ON k.id = ins.id
		ORDER BY ins.id
	)
	SELECT ` + sandboxColumns + ` FROM ins s`

// createOne inserts one ownerless sandbox with its first event.
func (s *Store) createOne(ctx context.Context, r newSandboxRow) (domain.Sandbox, error) {
	sb, err := insertSandbox(ctx, s.pool, r, s.Now())
	if err == nil {
		s.announce(sb)
	}
	return sb, err
}

// createMany inserts ownerless sandboxes, each with its first event, in one
// statement and one durable commit.
func (s *Store) createMany(ctx context.Context, rows []newSandboxRow) (map[string]domain.Sandbox, error) {
	var (
		id, tenant, provider, setup = make([]string, len(rows)), make([]string, len(rows)), make([]string, len(rows)), make([]string, len(rows))
		labels, env, params         = make([][]byte, len(rows)), make([][]byte, len(rows)), make([][]byte, len(rows))
		at, expires, deadline       = make([]time.Time, len(rows)), make([]time.Time, len(rows)), make([]time.Time, len(rows))
		keyIDs, keyNames            = make([]*string, len(rows)), make([]*string, len(rows))
	)
	now := s.Now()
	for i, r := range rows {
		id[i], tenant[i], provider[i], setup[i] = r.id, r.tenant, r.provider, r.setup
		labels[i], env[i], params[i] = r.labels, r.env, r.params
		at[i], expires[i], deadline[i] = now, now.Add(r.ttl), now.Add(r.createTimeout)
		keyIDs[i], keyNames[i] = nullable(r.by.KeyID), nullable(r.by.KeyName)
	}
	pgRows, err := query(ctx, s.pool, insertSandboxesSQL, namedArgs{
		"ids": id, "tenants": tenant, "providers": provider, "labels": labels, "envs": env, "setups": setup,
		"params": params, "created_at": at, "expires_at": expires, "create_deadlines": deadline,
		"key_ids": keyIDs, "key_names": keyNames,
	})
	if err != nil {
		return nil, err
	}
	created, err := collectSandboxes(pgRows)
	if err != nil {
		return nil, err
	}
	s.announce(created...)
	return byID(created), nil
}

func byID(sbs []domain.Sandbox) map[string]domain.Sandbox {
	m := make(map[string]domain.Sandbox, len(sbs))
	for _, sb := range sbs {
		m[sb.ID] = sb
	}
	return m
}

// CreateSandbox records a new sandbox in state requested with its first
// event. With an idempotency key it returns the sandbox an earlier request
// with the same key and hash made, and created is false; a different hash is
// an IDEMPOTENCY_KEY_REUSED error. A create naming an owner judges that
// owner's lease: callers run SettleOutage first.
func (s *Store) CreateSandbox(ctx context.Context, p domain.CreateParams) (sb domain.Sandbox, created bool, err error) {
	r, err := newRow(p)
	if err != nil {
		return sb, false, wrap("create sandbox", err)
	}
	if p.IdempotencyKey == "" && p.Owner == "" && p.ID == "" && p.OnEnd == "" && p.FromSnapshot == "" {
		// The common case needs no transaction of its own: concurrent
		// creates share one statement and one commit (see s.creates in New).
		sb, err = s.creates.do(ctx, r)
		if err != nil {
			return domain.Sandbox{}, false, wrap("create sandbox", err)
		}
		return sb, true, nil
	}
	now := s.Now()
	var lapsed []domain.Sandbox
	err = s.pool.inTx(ctx, func(tx pgx.Tx) error {
		if p.IdempotencyKey != "" {
			earlier, replay, err := replayedCreate(ctx, tx, p, r.id, now)
			if err != nil || replay {
				sb = earlier
				return err
			}
		}
		if p.Owner != "" {
			var err error
			if lapsed, err = s.ensureOwnerLease(ctx, tx, now, p.Tenant, p.Owner, p.OwnerTTL); err != nil {
				return err
			}
		}
		sb, err = insertSandbox(ctx, tx, r, now)
		created = err == nil
		return err
	})
	if err != nil {
		if idTaken(err) {
			return domain.Sandbox{}, false, domain.Errorf(domain.CodeSandboxIDTaken, "sandbox id %s is taken", r.id)
		}
		return domain.Sandbox{}, false, wrap("create sandbox", err)
	}
	s.announce(lapsed...)
	if created {
		s.announce(sb)
	}
	return sb, created, nil
}

// replayedCreate records, in tx, p's idempotency key for the sandbox id,
// or finds it recorded by an earlier create: then it returns that
// create's sandbox, and replay is true. The earlier create must have had
// the same request hash, else it is IDEMPOTENCY_KEY_REUSED.
func replayedCreate(ctx context.Context, tx pgx.Tx, p domain.CreateParams, id string, now time.Time) (sb domain.Sandbox, replay bool, err error) {
	var (
		existing string
		hash     []byte
		inserted bool
	)
	// xmax is 0 in a row this statement inserted, and not in one the
	// conflict clause updated: a replay of a create with a client-chosen
	// id finds its own id there, not a fresh one.
	err = queryRow(ctx, tx, `
		INSERT INTO idempotency_keys (tenant, key, request_hash, sandbox_id, created_at)
		VALUES (@tenant, @key, @hash, @id, @now)
		ON CONFLICT (tenant, key) DO UPDATE SET tenant = EXCLUDED.tenant
		RETURNING sandbox_id, request_hash, xmax = 0`,
		namedArgs{"tenant": p.Tenant, "key": p.IdempotencyKey, "hash": p.RequestHash, "id": id, "now": now},
	).Scan(&existing, &hash, &inserted)
	if err != nil || inserted {
		return sb, false, err
	}
	if string(hash) != string(p.RequestHash) {
		if p.IdempotencyKey == p.ID {
			return sb, false, domain.Errorf(domain.CodeIdempotencyKeyReused,
				"sandbox id %s was already requested with a different request", p.ID)
		}
		return sb, false, domain.Errorf(domain.CodeIdempotencyKeyReused,
			"Idempotency-Key %q was already used with a different request", p.IdempotencyKey)
	}
	sb, err = scanSandbox(querySandbox(ctx, tx, sandboxSQL, namedArgs{"id": existing}))
	return sb, err == nil, err
}

// idTaken reports whether err is the insert of a sandbox whose id exists.
func idTaken(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.ConstraintName == "sandboxes_pkey"
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// getSandboxSQL reads the sandbox @id of @tenant as a client sees it.
var getSandboxSQL = `SELECT ` + clientColumns + ` FROM sandboxes s WHERE s.id = @id AND s.tenant = @tenant`

// GetSandbox returns the tenant's sandbox with the given id, or ErrNotFound.
// Like ListSandboxes, it leaves out Env, Setup and Params (see
// clientColumns); Sandbox reads them.
func (s *Store) GetSandbox(ctx context.Context, tenant, id string) (domain.Sandbox, error) {
	sb, err := scanSandbox(querySandbox(ctx, s.pool, getSandboxSQL, namedArgs{"id": id, "tenant": tenant}))
	if err != nil {
		return sb, wrap("get sandbox", err)
	}
	return sb, nil
}

// sandboxSQL reads the whole row of the sandbox @id, whatever its tenant.
var sandboxSQL = `SELECT ` + sandboxColumns + ` FROM sandboxes s WHERE s.id = @id`

// Sandbox returns the sandbox with the given id, whatever its tenant. It is
// for workers, never for client requests.
func (s *Store) Sandbox(ctx context.Context, id string) (domain.Sandbox, error) {
	sb, err := scanSandbox(querySandbox(ctx, s.pool, sandboxSQL, namedArgs{"id": id}))
	if err != nil {
		return sb, wrap("get sandbox", err)
	}
	return sb, nil
}

// listWhere is the condition of a list of sandboxes and its named
// arguments: one condition per filter set.
func listWhere(f domain.ListFilter) (string, namedArgs, error) {
	where, args := []string{"s.tenant = @tenant"}, namedArgs{"tenant": f.Tenant}
	if len(f.States) > 0 {
		states := make([]string, len(f.States))
		for i, st := range f.States {
			states[i] = string(st)
		}
		where, args["states"] = append(where, "s.state = ANY(@states)"), states
	}
	if len(f.Reasons) > 0 {
		reasons := make([]string, len(f.Reasons))
		for i, r := range f.Reasons {
			reasons[i] = string(r)
		}
		where, args["reasons"] = append(where, "s.reason = ANY(@reasons)"), reasons
	}
	if f.Owner != "" {
		where, args["owner"] = append(where, "s.owner = @owner"), f.Owner
	}
	if f.Provider != "" {
		where, args["provider"] = append(where, "s.provider = @provider"), f.Provider
	}
	if len(f.Labels) > 0 {
		b, err := json.Marshal(f.Labels)
		if err != nil {
			return "", nil, err
		}
		// The first condition matches the partial GIN index's predicate.
		where, args["labels"] = append(where, "s.labels <> '{}'::jsonb", "s.labels @> @labels::jsonb"), b
	}
	if !f.CreatedAfter.IsZero() {
		where, args["created_after"] = append(where, "s.created_at > @created_after"), f.CreatedAfter
	}
	if !f.CreatedBefore.IsZero() {
		where, args["created_before"] = append(where, "s.created_at < @created_before"), f.CreatedBefore
	}
	if f.Released != nil {
		where, args["released"] = append(where, "s.released = @released"), *f.Released
	}
	if f.After != nil {
		where = append(where, "(s.created_at, s.id) < (@after_created_at, @after_id)")
		args["after_created_at"], args["after_id"] = f.After.CreatedAt, f.After.ID
	}
	return strings.Join(where, " AND "), args, nil
}

// ListSandboxes returns the filtered sandboxes newest first, at most
// f.Limit of them, and the cursor of the next page (nil at the end).
func (s *Store) ListSandboxes(ctx context.Context, f domain.ListFilter) ([]domain.Sandbox, *domain.Cursor, error) {
	where, args, err := listWhere(f)
	if err != nil {
		return nil, nil, wrap("list sandboxes", err)
	}
	limit := f.Limit
	args["limit"] = limit + 1
	rows, err := query(ctx, s.pool, `SELECT `+clientColumns+` FROM sandboxes s WHERE `+where+`
		ORDER BY s.created_at DESC, s.id DESC LIMIT @limit`, args)
	if err != nil {
		return nil, nil, wrap("list sandboxes", err)
	}
	defer rows.Close()
	out := make([]domain.Sandbox, 0, limit)
	for rows.Next() {
		sb, err := scanSandbox(rows)
		if err != nil {
			return nil, nil, wrap("list sandboxes", err)
		}
		out = append(out, sb)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, wrap("list sandboxes", err)
	}
	var next *domain.Cursor
	if len(out) > limit {
		out = out[:limit]
		last := out[limit-1]
		next = &domain.Cursor{CreatedAt: last.CreatedAt, ID: last.ID}
	}
	return out, next, nil
}

// renewSandboxSQL moves the deadline of live sandbox @id of @tenant to
// @expires_at, capped at its creation plus @max_lifetime, at @now.
var renewSandboxSQL = `
		UPDATE sandboxes s SET expires_at = least(@expires_at::timestamptz, s.created_at + @max_lifetime::interval), updated_at = @now
		WHERE s.id = @id AND s.tenant = @tenant AND ` + byIDState("s.state", liveStates) + `
		RETURNING ` + sandboxColumns

// RenewSandbox sets the live sandbox's deadline to now+ttl, capped at its
// creation plus maxLifetime; capped reports whether the cap applied. A
// terminal sandbox is a SANDBOX_STATE_CONFLICT.
func (s *Store) RenewSandbox(ctx context.Context, tenant, id string, ttl, maxLifetime time.Duration) (sb domain.Sandbox, capped bool, err error) {
	now := s.Now()
	sb, err = scanSandbox(querySandbox(ctx, s.pool, renewSandboxSQL, namedArgs{
		"id": id, "tenant": tenant, "expires_at": now.Add(ttl), "max_lifetime": maxLifetime, "now": now,
	}))
	if errors.Is(err, pgx.ErrNoRows) {
		cur, gerr := s.GetSandbox(ctx, tenant, id)
		if gerr != nil {
			return cur, false, gerr
		}
		return cur, false, domain.StateConflict(id, cur.State, "renew a sandbox that has ended")
	}
	if err != nil {
		return sb, false, wrap("renew sandbox", err)
	}
	return sb, sb.ExpiresAt.Before(now.Add(ttl)), nil
}
