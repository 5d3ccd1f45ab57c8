package store

import (
	"context"

	"github.com/tetherhq/tether/internal/domain"
)

// RecordE2BSandbox records that the sandbox id was made through E2B's API,
// with public traffic allowed or not, so that it is served on E2B's
// per-sandbox hosts (docs/e2b.md). Only E2B's create calls it, for the
// sandbox its /v1 create just made with the caller's key. An unknown
// sandbox is ErrNotFound; one recorded already, an error.
func (s *Store) RecordE2BSandbox(ctx context.Context, id string, publicTraffic bool) (domain.E2BSandbox, error) {
	var e domain.E2BSandbox
	err := queryRow(ctx, s.pool, `
		INSERT INTO e2b_sandboxes (sandbox_id, tenant, public_traffic)
		SELECT id, tenant, @public FROM sandboxes WHERE id = @id
		RETURNING sandbox_id, tenant, public_traffic`, namedArgs{"id": id, "public": publicTraffic}).
		Scan(&e.SandboxID, &e.Tenant, &e.PublicTraffic)
	if err != nil {
		return domain.E2BSandbox{}, wrap("record e2b sandbox", err)
	}
	return e, nil
}

// E2BSandbox returns what is kept of the sandbox id for E2B's hosts;
// ErrNotFound for a sandbox not made through E2B's API (or unknown). It
// says nothing of the sandbox's state: the caller reads the sandbox, of
// the tenant it names.
func (s *Store) E2BSandbox(ctx context.Context, id string) (domain.E2BSandbox, error) {
	var e domain.E2BSandbox
	err := queryRow(ctx, s.pool, `SELECT sandbox_id, tenant, public_traffic FROM e2b_sandboxes WHERE sandbox_id = @id`,
		namedArgs{"id": id}).Scan(&e.SandboxID, &e.Tenant, &e.PublicTraffic)
	if err != nil {
		return domain.E2BSandbox{}, wrap("e2b sandbox", err)
	}
	return e, nil
}
