-- 0013: SSH public keys, registered per tenant, that log in to the
-- tenant's instances through envd's SSH endpoint.
--   fingerprint: SHA256:<base64> of the key's wire form (ssh-keygen -l);
--                the lookup key at login, unique per tenant.
--   public_key:  the key in authorized_keys form, without its comment.
--   name:        the user's label (the key's comment by default).
CREATE TABLE ssh_keys (
    id          bigserial PRIMARY KEY,
    tenant_id   text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    name        text NOT NULL,
    fingerprint text NOT NULL,
    public_key  text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, fingerprint)
);
CREATE INDEX ssh_keys_fingerprint ON ssh_keys (fingerprint);
