-- Idempotency keys of creating requests other than operations (projects,
-- instances): the key is claimed before the object is made, pointing at the
-- object's name or id, so a retry finds the same object and a concurrent
-- duplicate cannot make a second one.
CREATE TABLE IF NOT EXISTS idempotency_keys (
    tenant_id     text NOT NULL,
    key           text NOT NULL,
    kind          text NOT NULL,
    request_hash  text NOT NULL,
    object_id     text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, key)
);
