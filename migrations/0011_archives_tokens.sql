-- 0011: volume archives belong to their tenant and project; tokens get ids,
-- an optional expiry and revocation.

-- A volume archive in the object store. envd chooses the key, under
-- volumes/<tenant>/<project>/<volume>/<name>/; a restore resolves the
-- archive through this row, never through a key the client gave alone.
--   project_id: the owning project; set to NULL when the project is deleted,
--               which marks the row's object for deletion (envd deletes the
--               object, then the row). The foreign key also makes a commit
--               racing a project deletion fail instead of leaving a row.
--   project:    the project's name, kept for listing and for messages about
--               rows whose project is gone.
--   name:       unique per project volume; replacing an archive moves the
--               row to a new key in one update, the old object is deleted
--               after.
--   node:       the node that wrote the archive.
CREATE TABLE volume_archives (
    id         bigserial PRIMARY KEY,
    tenant_id  text NOT NULL,
    project_id bigint REFERENCES projects (id) ON DELETE SET NULL,
    project    text NOT NULL,
    volume     text NOT NULL,
    name       text NOT NULL,
    key        text NOT NULL UNIQUE,
    size_bytes bigint NOT NULL CHECK (size_bytes >= 0),
    files      integer NOT NULL DEFAULT 0,
    node       text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (project_id, volume, name)
);
CREATE INDEX volume_archives_orphans ON volume_archives (id) WHERE project_id IS NULL;

-- Tokens:
--   id:           public, stable handle for listing and revoking (the hash
--                 stays the lookup key and is never shown).
--   expires_at:   NULL = never; compared with the database's clock.
--   revoked_at:   NULL = live; a revoked token is refused at once and kept
--                 for listing.
--   last_used_at: updated at most once a minute per token.
ALTER TABLE tokens ADD COLUMN id bigserial NOT NULL UNIQUE;
ALTER TABLE tokens ADD COLUMN expires_at timestamptz;
ALTER TABLE tokens ADD COLUMN revoked_at timestamptz;
ALTER TABLE tokens ADD COLUMN last_used_at timestamptz;
