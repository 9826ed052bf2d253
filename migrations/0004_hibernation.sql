-- layer_version: the version whose image an instance's rootfs sits on now,
-- when it differs from the version it started from (after waking from
-- hibernation it sits on the hibernation version). Saves stack on it, while
-- their expected current stays what the instance started from.
-- hibernated_version: set while a stopped retained instance has no local
-- layer and lives as that (non-current) version instead.
ALTER TABLE instances ADD COLUMN IF NOT EXISTS layer_version int;
ALTER TABLE instances ADD COLUMN IF NOT EXISTS hibernated_version int;
