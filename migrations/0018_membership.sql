-- Cluster membership, placement and node loss (issue 10).
--   nodes.state:            ready, cordoned (no new placements), draining
--                           (no placements; the node hibernates its
--                           instances), drained (drain finished), lost (its
--                           lease lapsed; its instances were failed).
--   nodes.labels:           {"key": "value"} for node_selector.
--   nodes.cpus, memory_bytes, disk_bytes, instance_slots: capacity as the
--                           node reports it at start (0 = not known / no
--                           bound for slots).
--   nodes.stopped:          the node shut down gracefully (no placements
--                           until it joins again; its lease still decides
--                           when it is lost).
--   nodes.lease_seconds:    the node's lease length; lease_expires_at is
--                           set from the DATABASE's clock (now()) on every
--                           renewal, never from a node's.
--   node_images:            which node has pulled which image (cache
--                           affinity of placement).
--   volume_homes:           the node holding a project's volume data, and
--                           the archive that carries it to another node
--                           (archive_key, '' = none newer than the data).
--   instances.placement:    why the instance was placed on its node.
ALTER TABLE nodes
    ADD COLUMN state text NOT NULL DEFAULT 'ready'
        CHECK (state IN ('ready', 'cordoned', 'draining', 'drained', 'lost')),
    ADD COLUMN labels jsonb NOT NULL DEFAULT '{}',
    ADD COLUMN cpus double precision NOT NULL DEFAULT 0,
    ADD COLUMN memory_bytes bigint NOT NULL DEFAULT 0,
    ADD COLUMN disk_bytes bigint NOT NULL DEFAULT 0,
    ADD COLUMN instance_slots integer NOT NULL DEFAULT 0,
    ADD COLUMN lease_seconds double precision NOT NULL DEFAULT 15,
    ADD COLUMN lease_expires_at timestamptz NOT NULL DEFAULT now() + interval '15 seconds',
    ADD COLUMN renewed_at timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN state_changed_at timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN version text NOT NULL DEFAULT '',
    ADD COLUMN stopped boolean NOT NULL DEFAULT false;

CREATE TABLE node_images (
    node      text NOT NULL,
    image     text NOT NULL,
    pulled_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (node, image)
);

CREATE TABLE volume_homes (
    project_id  bigint PRIMARY KEY REFERENCES projects (id) ON DELETE CASCADE,
    node        text NOT NULL,
    archive_key text NOT NULL DEFAULT '',
    updated_at  timestamptz NOT NULL DEFAULT now()
);

ALTER TABLE instances ADD COLUMN placement text NOT NULL DEFAULT '';

-- Periodic checkpoints of retained instances (projects.checkpoint_every_s,
-- NULL = never): a checkpoint is a non-current version of the instance's
-- layer, so that a retained instance on a lost node loses at most that
-- much. instances.checkpoint_version and checkpoint_at are its latest.
ALTER TABLE projects ADD COLUMN checkpoint_every_s integer CHECK (checkpoint_every_s > 0);
ALTER TABLE instances ADD COLUMN checkpoint_version integer, ADD COLUMN checkpoint_at timestamptz;
