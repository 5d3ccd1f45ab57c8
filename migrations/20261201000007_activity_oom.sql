-- +goose Up
-- An exec during which the sandbox's memory limit killed a process says
-- so in the sandbox's activity, not only in the exec's answer.
ALTER TABLE sandbox_activity ADD COLUMN oom_killed boolean NOT NULL DEFAULT false;

-- +goose Down
ALTER TABLE sandbox_activity DROP COLUMN oom_killed;
