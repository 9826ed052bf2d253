-- Background squash of deep versions (envd/squash).
-- squashed_from: the image the version had before its layers above the base
--                were squashed into one; the version's content is the same.
--                Kept owned (not collected) while an instance that may still
--                read its layers lazily runs from the version.
-- squash_started_at: a node's claim on squashing the version; a claim older
--                than the squash timeout may be taken over.
ALTER TABLE versions ADD COLUMN IF NOT EXISTS squashed_from text;
ALTER TABLE versions ADD COLUMN IF NOT EXISTS squash_started_at timestamptz;

-- Instance lists page by (created_at, id) within a tenant (envd/paging.go).
CREATE INDEX IF NOT EXISTS instances_tenant_created ON instances (tenant_id, created_at, id);
