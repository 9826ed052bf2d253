-- 0016: fleet rollouts (envd/rollout) and what projects declare for them.
--
-- A rollout moves every selected project whose current version sits on
-- from_image onto to_image, wave by wave. Its state:
--   running -> paused -> running ... -> succeeded | stopped_budget | failed | canceled,
--   then rolled_back after a rollback. A dry run only computes conflicts.
-- operation_id is the operation (kind rollout) that runs it; its events are
-- the rollout's log.
CREATE TABLE rollouts (
    id            text PRIMARY KEY,
    operation_id  text NOT NULL,
    tenant_filter text NOT NULL DEFAULT '',          -- '' = every tenant
    selector      text NOT NULL DEFAULT '',          -- project name glob; '' = all
    from_image    text NOT NULL,                     -- repo@digest
    to_image      text NOT NULL,                     -- repo@digest
    from_name     text NOT NULL DEFAULT '',          -- as asked
    to_name       text NOT NULL DEFAULT '',
    validate      jsonb NOT NULL DEFAULT '[]',       -- extra argv commands
    wave_size     integer NOT NULL CHECK (wave_size > 0),
    max_failures  integer NOT NULL CHECK (max_failures >= 0),
    dry_run       boolean NOT NULL DEFAULT false,
    allow_conflicts boolean NOT NULL DEFAULT false,
    state         text NOT NULL CHECK (state IN ('running', 'paused', 'succeeded', 'stopped_budget',
                                                 'failed', 'canceled', 'rolled_back')),
    message       text NOT NULL DEFAULT '',
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    finished_at   timestamptz
);

-- One selected project of a rollout. status:
--   pending -> running -> switched | validation_failed | conflicts | skipped | failed
--   (dry run: clean | conflicts); switched -> rolled_back.
-- old_version is the current the project had when selected, new_version the
-- migrated one (0 = none made). output is the failing command's output tail.
CREATE TABLE rollout_projects (
    rollout_id    text NOT NULL REFERENCES rollouts (id) ON DELETE CASCADE,
    tenant_id     text NOT NULL,
    project       text NOT NULL,
    seq           integer NOT NULL,
    status        text NOT NULL CHECK (status IN ('pending', 'running', 'switched', 'validation_failed', 'conflicts',
                                                  'skipped', 'rolled_back', 'failed', 'clean')),
    old_version   integer NOT NULL DEFAULT 0,
    new_version   integer NOT NULL DEFAULT 0,
    conflicts     text[] NOT NULL DEFAULT '{}',
    database_conflict boolean NOT NULL DEFAULT false,
    message       text NOT NULL DEFAULT '',
    output        text NOT NULL DEFAULT '',
    trial_instance text NOT NULL DEFAULT '',         -- of the newest attempt, removed if a restart interrupts it
    started_at    timestamptz,
    finished_at   timestamptz,
    PRIMARY KEY (rollout_id, tenant_id, project)
);
CREATE INDEX rollout_projects_seq ON rollout_projects (rollout_id, seq);

-- validate: argv commands every migration of the project runs in its
-- trial instance (besides those the request names).
-- rollout_failure: set when a rollout could not move the project
-- ({"rollout", "status", "message", "at"}); cleared by the next successful
-- switch of current.
ALTER TABLE projects ADD COLUMN validate jsonb NOT NULL DEFAULT '[]';
ALTER TABLE projects ADD COLUMN rollout_failure jsonb;
