-- Egress secret cache invalidation. Each node's egress proxy keeps the
-- bound secrets of the tenants it serves in memory (envd/secretcache.go)
-- instead of asking the database for each HTTP request and each TLS
-- connection. Every change of a tenant's secrets (put, rotation, binding,
-- unbinding, revocation) and every removal
-- of a project notifies channel envd_secrets at commit, so every node's
-- cache drops what changed before its next lookup. Payload: 't:' || tenant
-- or 'p:' || project id.
CREATE OR REPLACE FUNCTION envd_notify_secrets() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM pg_notify('envd_secrets', 't:' || OLD.tenant_id);
        RETURN OLD;
    END IF;
    PERFORM pg_notify('envd_secrets', 't:' || NEW.tenant_id);
    IF TG_OP = 'UPDATE' AND OLD.tenant_id IS DISTINCT FROM NEW.tenant_id THEN
        PERFORM pg_notify('envd_secrets', 't:' || OLD.tenant_id);
    END IF;
    RETURN NEW;
END
$$;

DROP TRIGGER IF EXISTS secrets_notify ON secrets;
CREATE TRIGGER secrets_notify AFTER INSERT OR UPDATE OR DELETE ON secrets
    FOR EACH ROW EXECUTE FUNCTION envd_notify_secrets();

CREATE OR REPLACE FUNCTION envd_notify_project_gone() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('envd_secrets', 'p:' || OLD.id);
    RETURN OLD;
END
$$;

DROP TRIGGER IF EXISTS projects_notify_secrets ON projects;
CREATE TRIGGER projects_notify_secrets AFTER DELETE ON projects
    FOR EACH ROW EXECUTE FUNCTION envd_notify_project_gone();
