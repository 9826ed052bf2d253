-- 0012: the registry sweep epoch (versions.Store.BeginUpload and Sweep).
--
-- One row. A sweep increments epoch, under the cluster-wide exclusive
-- advisory lock, before it deletes anything. An upload reads it once it
-- holds the shared lock, and its commit checks it is unchanged: if the
-- upload's lock was lost (its connection broke), a sweep that ran meanwhile
-- is seen and the commit refused, so no version records content a sweep may
-- have deleted.
CREATE TABLE IF NOT EXISTS gc_epoch (
    id    boolean PRIMARY KEY DEFAULT true CHECK (id),
    epoch bigint  NOT NULL DEFAULT 0
);
INSERT INTO gc_epoch (id, epoch) VALUES (true, 0) ON CONFLICT (id) DO NOTHING;
