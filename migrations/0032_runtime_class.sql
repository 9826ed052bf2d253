-- 0032: runtime classes per project and per tenant (runtime/class.go).
--   projects.runtime_class:  the class the project's instances run on
--                            ('runc', 'gvisor'); '' = the node's default.
--   tenants.runtime_classes: the classes the tenant's projects and
--                            instances may use, set by an admin; NULL = any.
ALTER TABLE projects ADD COLUMN IF NOT EXISTS runtime_class text NOT NULL DEFAULT ''
    CHECK (runtime_class IN ('', 'runc', 'gvisor'));
ALTER TABLE tenants ADD COLUMN IF NOT EXISTS runtime_classes text[]
    CHECK (runtime_classes IS NULL OR runtime_classes <@ ARRAY['runc', 'gvisor']::text[]);
