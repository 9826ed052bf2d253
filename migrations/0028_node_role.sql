-- envd_node: the database rights of a node that joined with a join token.
-- Each such node logs in as a role of its own, member of this one
-- (versions.Store.CreateNodeRole), so that one node's credentials can be
-- revoked alone and none of them is the admin's. A node runs instances,
-- saves, places, renews leases and serves every tenant's requests, so it
-- reads and writes most tables. It may not:
--   - mint or change API tokens (it records their use and revokes them:
--     tokens.last_used_at, revoked_at);
--   - change tenants' quotas and limits (it adds a tenant's row on first
--     use and locks the row for quota checks: tenants.created_at only);
--   - make, read or use join tokens;
--   - change the cluster's signing keys once made (cluster_key,
--     preview_key: insert only, as the first node to need one does);
--   - change the schema (it owns nothing; migrations run as the admin).
-- What it can still do is in docs/deploy.md, "What a node can do".
-- The role is made only when the role running the migrations may create
-- roles (a superuser, or CREATEROLE); otherwise joins hand out the admin's
-- credentials as before and say so. Tables made by later migrations get
-- the full rights by default: a later migration that adds an admin-only
-- table revokes them there.
DO $$
DECLARE
    s text := current_schema();
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = current_user AND (rolsuper OR rolcreaterole)) THEN
        RAISE NOTICE 'envd: role % may not create roles: no envd_node role', current_user;
        RETURN;
    END IF;
    BEGIN
        CREATE ROLE envd_node NOLOGIN;
    EXCEPTION WHEN duplicate_object OR unique_violation THEN
        NULL; -- made by another database of the server
    END;
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO envd_node', s);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA %I TO envd_node', s);
    EXECUTE format('GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA %I TO envd_node', s);
    EXECUTE format('ALTER DEFAULT PRIVILEGES IN SCHEMA %I GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO envd_node', s);
    EXECUTE format('ALTER DEFAULT PRIVILEGES IN SCHEMA %I GRANT USAGE, SELECT ON SEQUENCES TO envd_node', s);
    REVOKE INSERT, UPDATE, DELETE ON tokens, tenants, cluster_key, preview_key, schema_migrations FROM envd_node;
    REVOKE ALL ON join_tokens FROM envd_node;
    GRANT UPDATE (last_used_at, revoked_at) ON tokens TO envd_node;
    GRANT INSERT, UPDATE (created_at) ON tenants TO envd_node;
    GRANT INSERT ON cluster_key, preview_key TO envd_node;
END
$$;
