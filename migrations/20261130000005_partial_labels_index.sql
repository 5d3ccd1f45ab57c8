-- +goose Up
-- Most sandboxes carry no labels: keep them out of the (costly to update)
-- GIN index. Label filters add the predicate so the planner can use it.
DROP INDEX sandboxes_labels;
CREATE INDEX sandboxes_labels ON sandboxes USING gin (labels jsonb_path_ops) WHERE labels <> '{}'::jsonb;

-- +goose Down
DROP INDEX sandboxes_labels;
CREATE INDEX sandboxes_labels ON sandboxes USING gin (labels jsonb_path_ops);
