-- Join tokens (issue 10, item 1): `envd serve --join URL --token T` fetches
-- the cluster's settings (database, registry, S3) from a node with a token
-- an admin made (POST /v1/cluster/join-tokens).
--   hash:       sha256 of the token; the token itself is never stored.
--   expires_at: by the database's clock, as the nodes' leases.
--   used_at, used_by: a token is used once, by the node named here.
CREATE TABLE IF NOT EXISTS join_tokens (
    id         bigserial PRIMARY KEY,
    hash       bytea NOT NULL UNIQUE,
    created_by text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    used_at    timestamptz,
    used_by    text NOT NULL DEFAULT ''
);
