-- 0007: tenant quotas, and the bytes each version adds to storage.
--
-- A NULL limit is no limit.
--   max_instances:    live instances (Pending, Running, Pausing, Paused,
--                     Resuming, Stopping) of the tenant at once; stopped,
--                     failed and terminated ones use no compute.
--   max_versions:     versions of any one project of the tenant (those being
--                     deleted do not count).
--   max_stored_bytes: the layers the tenant's versions added (layer_bytes)
--                     plus the declared sizes of its volumes.
--   max_ttl_s:        the longest TTL an instance may ask for; with it, a TTL
--                     of "none" is refused.
ALTER TABLE tenants ADD COLUMN IF NOT EXISTS max_instances integer
    CHECK (max_instances IS NULL OR max_instances >= 0);
ALTER TABLE tenants ADD COLUMN IF NOT EXISTS max_versions integer
    CHECK (max_versions IS NULL OR max_versions >= 1);
ALTER TABLE tenants ADD COLUMN IF NOT EXISTS max_stored_bytes bigint
    CHECK (max_stored_bytes IS NULL OR max_stored_bytes >= 0);
ALTER TABLE tenants ADD COLUMN IF NOT EXISTS max_ttl_s bigint
    CHECK (max_ttl_s IS NULL OR max_ttl_s >= 1);

-- layer_bytes: the compressed size of the layer a version added (a save's
-- or hibernation's diff). 0 for bases, whose layers are the shared imported
-- image, and for versions recorded before this migration.
ALTER TABLE versions ADD COLUMN IF NOT EXISTS layer_bytes bigint NOT NULL DEFAULT 0;
