-- A project's version retention policy, applied by GC (versions.Store.MarkCollectable).
--   keep_last:         keep the newest N ready versions (of any kind, by
--                      number); NULL = no count limit.
--   keep_newer_than_s: keep versions created less than this many seconds
--                      ago; NULL (or 0, which keeps nothing by age) = no age
--                      limit.
-- A version is kept if either rule keeps it. A project with neither set has
-- no policy and keeps every version. Whatever the policy, GC never collects
-- a base, pinned or current version, nor one a not Terminated instance
-- references.
ALTER TABLE projects ADD COLUMN IF NOT EXISTS keep_last integer
    CHECK (keep_last IS NULL OR keep_last >= 1);
ALTER TABLE projects ADD COLUMN IF NOT EXISTS keep_newer_than_s bigint
    CHECK (keep_newer_than_s IS NULL OR keep_newer_than_s >= 0);
