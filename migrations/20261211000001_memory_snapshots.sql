-- +goose Up
-- A memory snapshot holds a whole machine (the microvm provider's: its
-- memory and device state with its disks), which new sandboxes resume
-- from; an ordinary one, a workspace. Asked for with
-- POST /v1/sandboxes/{id}/snapshots {"memory": true}.
ALTER TABLE snapshots ADD COLUMN memory boolean NOT NULL DEFAULT false;

-- +goose Down
ALTER TABLE snapshots DROP COLUMN memory;
