-- 0031: checkpoints with memory (issue 25). A checkpoint may also hold the
-- memory image of the instance's processes, taken at the same freeze as
-- its rootfs: an artifact in the project's repository (registry/memimage)
-- whose subject is the checkpoint version's manifest.
--   memory_image:     "repo@digest" of the artifact, '' for none. The row
--                     owns it: the orphan scan keeps it while the row lives.
--   memory_bytes:     what the artifact holds (its distinct chunks).
--   memory_new_bytes: what its push added to the repository (chunks no
--                     earlier artifact had): counted in the tenant's
--                     stored bytes.
--   memory_freeze_ms: how long the engine held the processes to write it
--                     (inside the checkpoint's freeze_ms).
--   resumed_by:       the instance that resumed the memory last. A resume
--                     claims the checkpoint while that instance is not
--                     Terminated or Failed, so two resumes of one
--                     checkpoint give one winner.
ALTER TABLE checkpoints
    ADD COLUMN IF NOT EXISTS memory_image text NOT NULL DEFAULT '',
    ADD COLUMN IF NOT EXISTS memory_bytes bigint NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS memory_new_bytes bigint NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS memory_freeze_ms bigint NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS resumed_by text NOT NULL DEFAULT '';
CREATE INDEX IF NOT EXISTS checkpoints_memory_image ON checkpoints (memory_image) WHERE memory_image <> '';
