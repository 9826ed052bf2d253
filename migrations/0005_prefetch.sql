-- Files the project's instances read first after a restore (recorded in
-- their first minute), in first-access order: the next save puts them first
-- in its eStargz layer, so the next lazy restore fetches them in one go.
ALTER TABLE projects ADD COLUMN IF NOT EXISTS prefetch text[] NOT NULL DEFAULT '{}';
