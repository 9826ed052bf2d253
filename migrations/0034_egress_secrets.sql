-- Egress by host name: what the node's egress gateway refused to a
-- project's instances (kept: the newest 1000 per project), and the tenants'
-- brokered secrets, added as a header by the gateway's proxy to plain HTTP
-- requests to the bound host.
--   sealed: 12-byte nonce || AES-256-GCM ciphertext of the value, with
--           tenant_id || 0x00 || name as additional data (a row copied to
--           another tenant or name does not open). The key is the node's
--           (envd --secret-key-file), never in the database.
CREATE TABLE IF NOT EXISTS egress_denials (
    id         bigserial PRIMARY KEY,
    project_id bigint NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    instance   text NOT NULL,
    kind       text NOT NULL,
    name       text NOT NULL DEFAULT '',
    dest       text NOT NULL DEFAULT '',
    reason     text NOT NULL,
    at         timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS egress_denials_project ON egress_denials (project_id, id);

CREATE TABLE IF NOT EXISTS secrets (
    tenant_id  text NOT NULL REFERENCES tenants (id),
    name       text NOT NULL,
    sealed     bytea NOT NULL,
    host       text,
    header     text NOT NULL DEFAULT '',
    format     text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, name)
);
CREATE INDEX IF NOT EXISTS secrets_bound ON secrets (tenant_id) WHERE host IS NOT NULL;
