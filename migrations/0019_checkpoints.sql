-- 0019: coordinated checkpoints (issue 14, item 5). A checkpoint is one
-- freeze of an instance recorded as one unit: its rootfs as a version and
-- each of its project's volumes as an archive, taken at the same moment.
--   number:   per project, from projects.next_checkpoint, never reused.
--   version:  the version that holds the rootfs; a row here keeps it from
--             retention and GC (the foreign key also refuses its deletion).
--   instance: the instance it was taken from (kept after it is gone).
--   freeze_ms: how long the instance's processes were frozen.
-- The volume archives are rows of volume_archives with checkpoint_id set
-- (their names start with '@', outside the grammar of user archive names,
-- so they never collide with one and are not listed, replaced or deleted
-- as user archives). Deleting a checkpoint sets its archives' project_id
-- to NULL, which hands their objects to the orphan-archive cleanup.
ALTER TABLE projects ADD COLUMN next_checkpoint integer NOT NULL DEFAULT 1;

CREATE TABLE checkpoints (
    id         bigserial PRIMARY KEY,
    project_id bigint NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    number     integer NOT NULL CHECK (number > 0),
    version    integer NOT NULL,
    instance   text NOT NULL DEFAULT '',
    message    text NOT NULL DEFAULT '',
    node       text NOT NULL DEFAULT '',
    freeze_ms  bigint NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (project_id, number),
    FOREIGN KEY (project_id, version) REFERENCES versions (project_id, number)
);
CREATE INDEX checkpoints_version ON checkpoints (project_id, version);

ALTER TABLE volume_archives ADD COLUMN checkpoint_id bigint REFERENCES checkpoints (id) ON DELETE SET NULL;
CREATE INDEX volume_archives_checkpoint ON volume_archives (checkpoint_id) WHERE checkpoint_id IS NOT NULL;
