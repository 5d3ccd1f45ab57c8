-- +goose Up
-- The stream orders events by (txid, id), and a transaction's id comes from
-- its first write, not its commit: a transaction that wrote something else
-- first (an owner's release, an outage credit) and then waited for a
-- sandbox's row lock writes that sandbox's next event with an older txid
-- than the event before it, which the stream would then show first. So an
-- event's txid is at least its sandbox's previous event's: each sandbox's
-- events keep the order they happened in (ties are broken by id, handed out
-- in that order too). The stream's cut still holds: the txid is never below
-- the writer's own, so an event is shown only once its transaction has
-- finished. The previous event is read with a fresh snapshot (a volatile
-- function's query, in READ COMMITTED), which sees what committed while
-- the statement waited for the row lock.
-- +goose StatementBegin
CREATE FUNCTION sandbox_events_keep_order() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	NEW.txid := greatest(NEW.txid, (SELECT e.txid FROM sandbox_events e
		WHERE e.sandbox_id = NEW.sandbox_id ORDER BY e.id DESC LIMIT 1));
	RETURN NEW;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER sandbox_events_keep_order BEFORE INSERT ON sandbox_events
	FOR EACH ROW EXECUTE FUNCTION sandbox_events_keep_order();

-- +goose Down
DROP TRIGGER sandbox_events_keep_order ON sandbox_events;
DROP FUNCTION sandbox_events_keep_order();
