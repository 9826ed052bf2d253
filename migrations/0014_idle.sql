-- 0014: idle stop and wake on access.
--   projects.idle_after_s:   how long an instance of the project may go
--                            without activity before its idle action runs;
--                            NULL = the node's default, 0 = never.
--   projects.idle_action:    'stop' or 'hibernate'; NULL = the node's default.
--   tenants.max_idle_after_s: the longest idle setting the tenant's projects
--                            may have (and the one applied when a project and
--                            the node set none); NULL = no maximum.
--   instances.last_activity_at: the newest activity (exec, terminal input,
--                            file, proxy, SSH) the nodes have flushed; the
--                            node that saw it may know a newer one in memory.
ALTER TABLE projects ADD COLUMN IF NOT EXISTS idle_after_s bigint
    CHECK (idle_after_s IS NULL OR idle_after_s >= 0);
ALTER TABLE projects ADD COLUMN IF NOT EXISTS idle_action text
    CHECK (idle_action IS NULL OR idle_action IN ('stop', 'hibernate'));
ALTER TABLE tenants ADD COLUMN IF NOT EXISTS max_idle_after_s bigint
    CHECK (max_idle_after_s IS NULL OR max_idle_after_s >= 1);
ALTER TABLE instances ADD COLUMN IF NOT EXISTS last_activity_at timestamptz;
