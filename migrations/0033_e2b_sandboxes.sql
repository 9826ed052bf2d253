-- What the E2B-compatible API (api/e2b) keeps of a sandbox that its
-- instance does not have: the template as the caller named it, the
-- caller's metadata and the environment of every command. It goes with
-- its instance.
CREATE TABLE IF NOT EXISTS e2b_sandboxes (
    instance_id text PRIMARY KEY REFERENCES instances (id) ON DELETE CASCADE,
    template    text NOT NULL,
    metadata    jsonb NOT NULL DEFAULT '{}',
    env         jsonb NOT NULL DEFAULT '{}'
);
