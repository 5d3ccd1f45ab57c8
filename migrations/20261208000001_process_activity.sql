-- +goose Up
-- Background processes and terminals (docs/processes.md) are recorded in
-- the sandbox's activity like an exec: every start, every input to a
-- process's stdin or terminal, every signal, and each terminal session
-- when it ends, with the process's pid inside the sandbox.
ALTER TABLE sandbox_activity DROP CONSTRAINT sandbox_activity_kind_check;
ALTER TABLE sandbox_activity ADD CONSTRAINT sandbox_activity_kind_check
    CHECK (kind IN ('exec', 'file_read', 'file_write', 'archive_read', 'archive_write', 'port', 'preview',
                    'process_start', 'process_input', 'process_signal', 'terminal'));
ALTER TABLE sandbox_activity ADD COLUMN pid integer;

-- +goose Down
ALTER TABLE sandbox_activity DROP COLUMN pid;
-- The Down of an append-only table: the process records go with the
-- kinds they use.
ALTER TABLE sandbox_activity DISABLE TRIGGER sandbox_activity_append_only;
DELETE FROM sandbox_activity WHERE kind IN ('process_start', 'process_input', 'process_signal', 'terminal');
ALTER TABLE sandbox_activity ENABLE TRIGGER sandbox_activity_append_only;
ALTER TABLE sandbox_activity DROP CONSTRAINT sandbox_activity_kind_check;
ALTER TABLE sandbox_activity ADD CONSTRAINT sandbox_activity_kind_check
    CHECK (kind IN ('exec', 'file_read', 'file_write', 'archive_read', 'archive_write', 'port', 'preview'));
