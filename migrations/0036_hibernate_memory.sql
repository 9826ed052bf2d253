-- 0036: hibernation that keeps memory (issue 25, item 5).
--   projects.idle_action gains 'hibernate-memory': the idle action that
--                        hibernates with the instance's processes (a memory
--                        image), falling back to 'hibernate' when memory
--                        cannot be kept.
--   instances.hibernated_checkpoint: while set, with hibernated_version,
--                        the instance wakes by resuming this checkpoint's
--                        memory image (the checkpoint, numbered per project,
--                        owns the image and counts it). It stays set through
--                        the wake's Pending, so that a wake cut short by a
--                        crash goes back to hibernated; cleared once the
--                        instance runs.
--   instances.memory_not_kept: the stable reason (class, connection,
--                        engine, ...) why an idle hibernation asked to keep
--                        memory kept only the disk; cleared at the next start.
ALTER TABLE projects DROP CONSTRAINT IF EXISTS projects_idle_action_check;
ALTER TABLE projects ADD CONSTRAINT projects_idle_action_check
    CHECK (idle_action IS NULL OR idle_action IN ('stop', 'hibernate', 'hibernate-memory'));
ALTER TABLE instances
    ADD COLUMN IF NOT EXISTS hibernated_checkpoint integer,
    ADD COLUMN IF NOT EXISTS memory_not_kept text NOT NULL DEFAULT '';
