-- The request an operation was started with, so that a node restarting
-- after a crash can run an unfinished operation again exactly as asked.
ALTER TABLE operations ADD COLUMN IF NOT EXISTS request jsonb NOT NULL DEFAULT '{}';

-- Base images imported by name. The registry holds the content; this row
-- is the name -> manifest mapping users see (envctl image ls).
CREATE TABLE IF NOT EXISTS images (
    name        text PRIMARY KEY,
    repo        text NOT NULL,
    digest      text NOT NULL,
    size_bytes  bigint NOT NULL DEFAULT 0,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
