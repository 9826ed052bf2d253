-- 0001: envd's initial schema.
--
-- Conventions: ids chosen by envd (instances, operations) are text; numbers
-- chosen by the database are bigserial. Optional values are NULL, never '' or
-- 0, where a foreign key or a compare-and-swap depends on them. Timestamps
-- are timestamptz set by the database (now() = transaction start).

-- A tenant owns tokens, quotas and projects. Rows are created on first use
-- (token or project creation).
CREATE TABLE tenants (
    id         text PRIMARY KEY,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- API tokens. Only sha256(token) in hex is stored; the token itself is shown
-- once, at creation.
CREATE TABLE tokens (
    token_hash text PRIMARY KEY,
    tenant_id  text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    admin      boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX tokens_tenant ON tokens (tenant_id);

-- A project is one lineage of versions.
--   base_image:      the pinned base, repo@digest.
--   current_version: the version new instances start from; NULL = none. It
--                    only changes by compare-and-swap (see versions.Store);
--                    the foreign key below (deferred, so a project and its
--                    first version are inserted in one transaction) makes a
--                    pointer to a missing version impossible.
--   next_version:    the number the next version gets. Incremented under the
--                    project's row lock, so numbers are unique and never
--                    reused, even after a version row is deleted.
CREATE TABLE projects (
    id              bigserial PRIMARY KEY,
    tenant_id       text NOT NULL REFERENCES tenants (id),
    name            text NOT NULL,
    base_image      text NOT NULL,
    spec            jsonb NOT NULL DEFAULT '{}',
    excludes        text[] NOT NULL DEFAULT '{}',
    compression     text NOT NULL DEFAULT '',
    current_version integer,
    next_version    integer NOT NULL DEFAULT 1,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, name)
);

-- An immutable, numbered environment: an OCI image (repo@digest).
--   state: creating -> ready | failed; ready -> deleting (GC). Only ready
--          versions can be current or restored.
--   parent: the version this one was derived from (NULL for a base). Lineage
--          only, no foreign key: an image carries all its layers, so a parent
--          may be collected while its children live (retention decides).
--   instance_id: the instance a snapshot was saved from, if any.
CREATE TABLE versions (
    project_id  bigint NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    number      integer NOT NULL CHECK (number > 0),
    kind        text NOT NULL CHECK (kind IN ('base', 'build', 'snapshot', 'migration')),
    state       text NOT NULL CHECK (state IN ('creating', 'ready', 'failed', 'deleting')),
    image       text NOT NULL DEFAULT '',
    parent      integer,
    message     text NOT NULL DEFAULT '',
    size_bytes  bigint NOT NULL DEFAULT 0,
    layers      integer NOT NULL DEFAULT 0,
    pinned      boolean NOT NULL DEFAULT false,
    instance_id text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (project_id, number)
);

ALTER TABLE projects ADD CONSTRAINT projects_current_version_fk
    FOREIGN KEY (id, current_version) REFERENCES versions (project_id, number)
    DEFERRABLE INITIALLY DEFERRED;

-- A container of a project on one node.
--   state:      Pending, Running, Pausing, Paused, Resuming, Stopping, Stopped,
--               Terminated, Failed (an open set: no CHECK); reason is the
--               machine-readable cause of the last transition.
--   version:    the version it was started from (the expected current of its
--               next save); last_saved_version: its latest committed save.
--   generation: fencing token, 1 at creation, incremented on every start or
--               ownership move; a node acts only with the newest.
--   expires_at: absolute; NULL = no TTL.
-- Deleting a project deletes its instances (the store refuses while any is
-- not Terminated).
CREATE TABLE instances (
    id                 text PRIMARY KEY,
    project_id         bigint NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    tenant_id          text NOT NULL,
    node               text NOT NULL DEFAULT '',
    version            integer NOT NULL,
    last_saved_version integer,
    generation         bigint NOT NULL DEFAULT 1,
    state              text NOT NULL,
    reason             text NOT NULL DEFAULT '',
    message            text NOT NULL DEFAULT '',
    retain             boolean NOT NULL DEFAULT false,
    expires_at         timestamptz,
    created_at         timestamptz NOT NULL DEFAULT now(),
    last_transition_at timestamptz NOT NULL DEFAULT now(),
    spec               jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX instances_project ON instances (project_id);
CREATE INDEX instances_tenant ON instances (tenant_id);
CREATE INDEX instances_node ON instances (node);

-- A long-running job. state: pending -> running -> succeeded | failed |
-- canceled (the last three are terminal). A retry with the same
-- idempotency_key (per tenant) and request_hash returns the same row; NULL
-- keys never collide. error is {"code", "message"}. last_event_seq is the
-- seq of the newest event: incremented in the statement that inserts the
-- event, which locks this row, so seqs are 1..N without gaps.
CREATE TABLE operations (
    id               text PRIMARY KEY,
    tenant_id        text NOT NULL,
    kind             text NOT NULL,
    target           text NOT NULL DEFAULT '',
    state            text NOT NULL CHECK (state IN ('pending', 'running', 'succeeded', 'failed', 'canceled')),
    idempotency_key  text,
    request_hash     text NOT NULL DEFAULT '',
    result           jsonb,
    error            jsonb,
    cancel_requested boolean NOT NULL DEFAULT false,
    node             text NOT NULL DEFAULT '',
    last_event_seq   integer NOT NULL DEFAULT 0,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, idempotency_key)
);
CREATE INDEX operations_unfinished ON operations (node, created_at) WHERE state IN ('pending', 'running');

-- The ordered event log of an operation; seq starts at 1.
CREATE TABLE operation_events (
    operation_id text NOT NULL REFERENCES operations (id) ON DELETE CASCADE,
    seq          integer NOT NULL,
    at           timestamptz NOT NULL DEFAULT clock_timestamp(),
    type         text NOT NULL,
    message      text NOT NULL DEFAULT '',
    data         jsonb,
    PRIMARY KEY (operation_id, seq)
);
