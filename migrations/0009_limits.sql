-- 0009: tenant maxima of per-instance resource limits.
--
-- A NULL maximum is no maximum. A project's limits (in its spec) may not
-- exceed them; an instance's effective limits (in instances.spec, key
-- "limits") are cut to them.
--   max_memory_bytes: memory of one instance
--   max_pids:         processes and threads of one instance
--   max_cpus:         CPU quota of one instance, in cores
--   max_disk_bytes:   writable layer of one instance
ALTER TABLE tenants ADD COLUMN IF NOT EXISTS max_memory_bytes bigint
    CHECK (max_memory_bytes IS NULL OR max_memory_bytes >= 0);
ALTER TABLE tenants ADD COLUMN IF NOT EXISTS max_pids bigint
    CHECK (max_pids IS NULL OR max_pids >= 0);
ALTER TABLE tenants ADD COLUMN IF NOT EXISTS max_cpus double precision
    CHECK (max_cpus IS NULL OR max_cpus >= 0);
ALTER TABLE tenants ADD COLUMN IF NOT EXISTS max_disk_bytes bigint
    CHECK (max_disk_bytes IS NULL OR max_disk_bytes >= 0);
