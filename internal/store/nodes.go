package store

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetherhq/tether/internal/domain"
)

// DefaultNodeGrace is how long a node may go without a heartbeat before it
// counts as dead, unless WithNodeGrace says otherwise. It is long enough for
// a replica's restart, so a restarted node keeps its sandboxes.
const DefaultNodeGrace = time.Minute

// nodeDead is the SQL condition that the node named by the column col (of
// an outer query) is dead: no heartbeat within the named argument @grace,
// an interval. A NULL or unknown node is dead too. Liveness is judged by
// the database's clock, the one heartbeats are stamped with, so hosts'
// clocks need not agree.
func nodeDead(col string) string {
	return `NOT EXISTS (SELECT 1 FROM nodes n WHERE n.id = ` + col +
		` AND n.heartbeat_at > clock_timestamp() - @grace::interval)`
}

// Node is a node's heartbeat row.
type Node = domain.Node

// Heartbeat records that node n is alive now, at the database's clock,
// with its URL and providers. With starting, its start time is reset too.
// It runs on the main pool, not the workers' one, whose connections the
// executor's claims may all hold under load: a beat that waits there
// makes a live node look dead.
func (s *Store) Heartbeat(ctx context.Context, n Node, starting bool) error {
	_, err := exec(ctx, s.pool, `
		INSERT INTO nodes AS n (id, url, providers, started_at, heartbeat_at)
		VALUES (@id, @url, @providers, clock_timestamp(), clock_timestamp())
		ON CONFLICT (id) DO UPDATE SET url = EXCLUDED.url, providers = EXCLUDED.providers,
			heartbeat_at = EXCLUDED.heartbeat_at,
			started_at = CASE WHEN @starting THEN EXCLUDED.started_at ELSE n.started_at END`,
		namedArgs{"id": n.ID, "url": n.URL, "providers": n.Providers, "starting": starting})
	if err != nil {
		return wrap("heartbeat", err)
	}
	return nil
}

// nodeColumns is the select list of a node read, in scanNode's order, for
// a query over nodes n; the named argument @grace is the grace period.
const nodeColumns = `n.id, n.url, n.providers, n.started_at, n.heartbeat_at,
	n.heartbeat_at > clock_timestamp() - @grace::interval`

func scanNode(row pgx.Row, extra ...any) (Node, error) {
	var n Node
	err := row.Scan(append([]any{&n.ID, &n.URL, &n.Providers, &n.StartedAt, &n.HeartbeatAt, &n.Alive}, extra...)...)
	return n, err
}

// collectNodes reads rows of nodeColumns and a count of live sandboxes.
func collectNodes(rows pgx.Rows) ([]Node, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Node, error) {
		var live int
		n, err := scanNode(r, &live)
		n.LiveSandboxes = live
		return n, err
	})
}

// Nodes returns every node that has registered, with the count of the
// tenant's live sandboxes on each, by id.
func (s *Store) Nodes(ctx context.Context, tenant string) ([]Node, error) {
	rows, err := query(ctx, s.pool, `
		SELECT `+nodeColumns+`,
			(SELECT count(*) FROM sandboxes sb WHERE sb.node = n.id AND sb.tenant = @tenant AND sb.state IN `+liveStates+`)
		FROM nodes n ORDER BY n.id`, namedArgs{"grace": s.nodeGrace, "tenant": tenant})
	if err != nil {
		return nil, wrap("list nodes", err)
	}
	nodes, err := collectNodes(rows)
	if err != nil {
		return nil, wrap("list nodes", err)
	}
	return nodes, nil
}

// Node returns the node with the given id, or ErrNotFound.
func (s *Store) Node(ctx context.Context, id string) (Node, error) {
	n, err := scanNode(queryRow(ctx, s.pool, `SELECT `+nodeColumns+` FROM nodes n WHERE n.id = @id`,
		namedArgs{"grace": s.nodeGrace, "id": id}))
	if err != nil {
		return n, wrap("get node", err)
	}
	return n, nil
}

// Load is how a node's share of a host-bound provider's live sandboxes
// compares with the other live nodes', for placing creates.
type Load struct {
	// Own counts the live sandboxes placed on the node; Least is the
	// smallest such count among live nodes with the provider, Nodes how
	// many such nodes there are (the node itself included).
	Own, Least, Nodes int
	// OldestRequest is when the provider's oldest unclaimed request was
	// made, zero when there is none.
	OldestRequest time.Time
	// Serves is whether the node itself offers the provider now (its
	// heartbeat lists it: the provider is available there).
	Serves bool
}

// NodeLoad returns node's load for provider.
func (s *Store) NodeLoad(ctx context.Context, provider, node string) (Load, error) {
	var (
		l      Load
		oldest *time.Time
	)
	err := queryRow(ctx, s.work, `
		WITH load AS (
			SELECT n.id, (SELECT count(*) FROM sandboxes sb
				WHERE sb.node = n.id AND sb.provider = @provider AND sb.state IN `+liveStates+`) AS live
			FROM nodes n
			WHERE @provider = ANY(n.providers) AND (n.id = @node OR n.heartbeat_at > clock_timestamp() - @grace::interval)
		)
		SELECT COALESCE((SELECT live FROM load WHERE id = @node), 0),
			COALESCE((SELECT min(live) FROM load), 0), (SELECT count(*) FROM load),
			(SELECT min(created_at) FROM sandboxes WHERE provider = @provider AND state = 'requested'),
			EXISTS (SELECT 1 FROM load WHERE id = @node)`,
		namedArgs{"grace": s.nodeGrace, "provider": provider, "node": node}).Scan(&l.Own, &l.Least, &l.Nodes, &oldest, &l.Serves)
	if err != nil {
		return l, wrap("node load", err)
	}
	if oldest != nil {
		l.OldestRequest = *oldest
	}
	return l, nil
}

// Stranded is a ready or creating sandbox on a dead node.
type Stranded struct {
	ID, Node string
	// HeartbeatAt is the node's last heartbeat.
	HeartbeatAt time.Time
}

// StrandedSandboxes returns up to limit live sandboxes past requested
// (creating, ready, pausing, paused, resuming) placed on nodes that are
// dead.
func (s *Store) StrandedSandboxes(ctx context.Context, limit int) ([]Stranded, error) {
	rows, err := query(ctx, s.pool, `
		SELECT sb.id, sb.node, COALESCE(n.heartbeat_at, '-infinity')
		FROM sandboxes sb LEFT JOIN nodes n ON n.id = sb.node
		WHERE sb.node IS NOT NULL AND sb.state IN `+placedStates+` AND `+nodeDead("sb.node")+`
		ORDER BY sb.id LIMIT @limit`, namedArgs{"grace": s.nodeGrace, "limit": limit})
	if err != nil {
		return nil, wrap("stranded sandboxes", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Stranded, error) {
		var st Stranded
		err := r.Scan(&st.ID, &st.Node, &st.HeartbeatAt)
		return st, err
	})
	if err != nil {
		return nil, wrap("stranded sandboxes", err)
	}
	return out, nil
}

// AdoptUnplaced places on node the sandboxes of its host-bound providers
// that have no node but were claimed (live past requested, or not yet
// released): those a replica made before nodes existed. It adopts them only
// while no other node is alive, the single-host deployment that made them;
// it returns how many it adopted.
func (s *Store) AdoptUnplaced(ctx context.Context, node string, providers []string) (int64, error) {
	tag, err := exec(ctx, s.pool, `
		UPDATE sandboxes SET node = @node
		WHERE node IS NULL AND provider = ANY(@providers) AND state <> 'requested' AND NOT (state IN `+terminalStates+` AND released)
		  AND NOT EXISTS (SELECT 1 FROM nodes n WHERE n.id <> @node AND n.heartbeat_at > clock_timestamp() - @grace::interval)`,
		namedArgs{"grace": s.nodeGrace, "node": node, "providers": providers})
	if err != nil {
		return 0, wrap("adopt unplaced sandboxes", err)
	}
	return tag.RowsAffected(), nil
}

// ClusterSecret returns the secret replicas sign forwarded requests with,
// making it first if no replica has.
func (s *Store) ClusterSecret(ctx context.Context) ([]byte, error) {
	fresh := make([]byte, 32)
	if _, err := rand.Read(fresh); err != nil {
		return nil, fmt.Errorf("store: cluster secret: %w", err)
	}
	var secret []byte
	err := queryRow(ctx, s.pool, `
		WITH ins AS (
			INSERT INTO cluster_secret (secret) VALUES (@secret) ON CONFLICT (id) DO NOTHING RETURNING secret
		)
		SELECT secret FROM ins UNION ALL SELECT secret FROM cluster_secret LIMIT 1`, namedArgs{"secret": fresh}).Scan(&secret)
	if errors.Is(err, pgx.ErrNoRows) {
		// Another replica made it while this statement's snapshot was
		// taken: it has committed now.
		err = s.pool.QueryRow(ctx, `SELECT secret FROM cluster_secret`).Scan(&secret)
	}
	if err != nil {
		return nil, wrap("cluster secret", err)
	}
	return secret, nil
}

// RememberNonce records the nonce of a forwarded call until expires, and
// reports whether it is new: false means some replica took a call with
// this nonce before (a replay). Each call also deletes a few expired
// nonces, so that the table stays as small as the calls of the last
// minutes.
func (s *Store) RememberNonce(ctx context.Context, nonce string, expires time.Time) (bool, error) {
	var fresh bool
	err := queryRow(ctx, s.pool, `
		WITH gc AS (
			DELETE FROM forward_nonces WHERE nonce IN (
				SELECT nonce FROM forward_nonces WHERE expires_at < @now ORDER BY expires_at LIMIT 16
				FOR UPDATE SKIP LOCKED)
		), ins AS (
			INSERT INTO forward_nonces (nonce, expires_at) VALUES (@nonce, @expires_at)
			ON CONFLICT (nonce) DO NOTHING
			RETURNING true AS fresh
		)
		SELECT coalesce((SELECT fresh FROM ins), false)`, namedArgs{"nonce": nonce, "expires_at": expires, "now": s.Now()}).Scan(&fresh)
	if err != nil {
		return false, wrap("remember nonce", err)
	}
	return fresh, nil
}
