-- +goose Up
-- Webhooks. The outbox is the event history itself: every state change
-- writes its event in its own transaction already, so an endpoint keeps a
-- cursor into the tenant's event stream (a position (txid, id), read the
-- way GET /v1/events/stream reads it, so that no event that commits late
-- is skipped) and nothing is added to the create/delete path.
--
-- secret is the endpoint's HMAC key. It signs every delivery, so it is
-- kept as is, not hashed (as the cluster secret is); the API shows it
-- once, at create.
CREATE TABLE webhooks (
    id                text PRIMARY KEY,
    tenant            text NOT NULL REFERENCES tenants (name),
    url               text NOT NULL,
    description       text NOT NULL DEFAULT '',
    secret            text NOT NULL,
    -- The filter: empty arrays match every event.
    filter_states     text[] NOT NULL DEFAULT '{}',
    filter_reasons    text[] NOT NULL DEFAULT '{}',
    state             text NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'failing')),
    -- Delivered through: the next delivery starts after this position.
    cursor_tx         xid8 NOT NULL,
    cursor_id         bigint NOT NULL,
    created_at        timestamptz NOT NULL,
    created_by_key_id text,
    failing_since     timestamptz,
    CHECK ((state = 'failing') = (failing_since IS NOT NULL))
);
CREATE INDEX webhooks_tenant ON webhooks (tenant, created_at, id);

-- A delivery is a batch of an endpoint's events, recorded before it is
-- sent and resent as it is (same id, same events) until the receiver
-- answers 2xx or retries run out. An endpoint has at most one pending
-- delivery, which keeps its deliveries in stream order.
CREATE TABLE webhook_deliveries (
    seq              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id               text NOT NULL UNIQUE,
    webhook_id       text NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    tenant           text NOT NULL,
    status           text NOT NULL CHECK (status IN ('pending', 'delivered', 'failed', 'cancelled')),
    event_ids        bigint[] NOT NULL,
    -- The stream positions the batch covers (after first_*, through last_*).
    after_tx         xid8 NOT NULL,
    after_id         bigint NOT NULL,
    last_tx          xid8 NOT NULL,
    last_id          bigint NOT NULL,
    attempts         integer NOT NULL DEFAULT 0,
    created_at       timestamptz NOT NULL,
    next_attempt_at  timestamptz,
    last_attempt_at  timestamptz,
    delivered_at     timestamptz,
    -- The worker sending it and until when (a lapsed lease is taken over).
    lease_owner      text,
    lease_expires_at timestamptz,
    response_status  integer,
    error            text,
    CHECK ((status = 'pending') = (next_attempt_at IS NOT NULL))
);
CREATE UNIQUE INDEX webhook_deliveries_one_pending ON webhook_deliveries (webhook_id) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_history ON webhook_deliveries (webhook_id, seq);

-- +goose Down
DROP TABLE webhook_deliveries;
DROP TABLE webhooks;
