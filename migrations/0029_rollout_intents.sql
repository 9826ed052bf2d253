-- 0027: a rollout's rollback runs as an operation, and every switch of a
-- project's current by a rollout or its rollback is written down before it
-- is made (issue "Hostile tenants, round two", item 5).
--
-- rolling_back: a rollback was asked and has not finished; its operation
-- is rollback_operation_id ('' = none yet). A new rollback request while
-- that operation is unfinished gets it; after it failed or was canceled,
-- the request starts another that goes on where it stopped.
ALTER TABLE rollouts DROP CONSTRAINT IF EXISTS rollouts_state_check;
ALTER TABLE rollouts ADD CONSTRAINT rollouts_state_check CHECK (state IN ('running', 'paused', 'succeeded', 'stopped_budget',
    'failed', 'canceled', 'rolling_back', 'rolled_back'));
ALTER TABLE rollouts ADD COLUMN rollback_operation_id text NOT NULL DEFAULT '';

-- switching_to: the version a switch of the project's current is about to
-- make current (the rollout's: new_version; its rollback's: old_version),
-- written before the compare-and-swap and cleared with the record of its
-- outcome. 0 = no switch in flight. After a crash, the project's current
-- says whether the swap happened.
ALTER TABLE rollout_projects ADD COLUMN switching_to integer NOT NULL DEFAULT 0;
