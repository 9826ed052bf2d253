-- 0008: validated: a build's or migration's validation commands passed in a
-- trial instance (or it had none). Only validated builds are reused by an
-- equal build; an unvalidated one was interrupted or is still validating.
ALTER TABLE versions ADD COLUMN IF NOT EXISTS validated boolean NOT NULL DEFAULT false;
