-- Warm pools (envd/lifecycle/pool.go).
-- projects.pool_size: how many started instances of the current version a
--   project keeps ready for `up` to claim (0 = none).
-- pool_instances: the instances that are in a pool. Such an instance is an
--   ordinary row of instances (it counts against the tenant's quota) that
--   no API call sees until it is claimed: the claim deletes its row here.
ALTER TABLE projects ADD COLUMN IF NOT EXISTS pool_size integer NOT NULL DEFAULT 0 CHECK (pool_size >= 0);
CREATE TABLE IF NOT EXISTS pool_instances (
    instance_id text PRIMARY KEY,
    project_id  bigint NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    version     integer NOT NULL,
    node        text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS pool_instances_project ON pool_instances (project_id, version);
