-- 0035: webhooks (envd/webhooks, versions.Webhooks).
--
-- A tenant's hook is a URL that gets the tenant's events, signed with the
-- hook's secret (HMAC-SHA256; the secret is kept to sign with and shown
-- once, at creation). events are the subscribed types: an exact type
-- ("instance.state"), a family ("operation.*") or "*" (every type).
CREATE TABLE webhooks (
    id          text PRIMARY KEY,
    tenant_id   text NOT NULL,
    url         text NOT NULL,
    events      text[] NOT NULL DEFAULT '{*}',
    secret      text NOT NULL,
    description text NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhooks_tenant ON webhooks (tenant_id);

-- One event of a tenant, recorded by the triggers below in the transaction
-- that made the change, so an event exists exactly when its change
-- committed. data has the event stream's payloads (an instance, an
-- operation, a rollout's project); id orders a tenant's events.
CREATE TABLE webhook_events (
    id        bigserial PRIMARY KEY,
    tenant_id text NOT NULL,
    type      text NOT NULL,
    message   text NOT NULL DEFAULT '',
    data      jsonb NOT NULL DEFAULT '{}',
    at        timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- One event to send to one hook. state: pending -> delivered | failed
-- (failed = given up after the most attempts). A hook's deliveries are sent
-- in id order: a pending one waits for every earlier pending one of its
-- hook. attempts counts the tries; next_attempt_at is when the next may
-- start (exponential backoff); last_error and response_code are the last
-- try's.
CREATE TABLE webhook_deliveries (
    id              bigserial PRIMARY KEY,
    hook_id         text NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    event_id        bigint NOT NULL REFERENCES webhook_events (id) ON DELETE CASCADE,
    state           text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    last_error      text NOT NULL DEFAULT '',
    response_code   integer NOT NULL DEFAULT 0,
    created_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz
);
CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (hook_id, id) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_hook ON webhook_deliveries (hook_id, id DESC);

-- webhook_emit records an event of tenant and a delivery for each of the
-- tenant's hooks subscribed to its type; nothing when no hook is.
CREATE FUNCTION webhook_emit(p_tenant text, p_type text, p_message text, p_data jsonb) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    ev bigint;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM webhooks WHERE tenant_id = p_tenant
                   AND (p_type = ANY (events) OR split_part(p_type, '.', 1) || '.*' = ANY (events) OR '*' = ANY (events))) THEN
        RETURN;
    END IF;
    INSERT INTO webhook_events (tenant_id, type, message, data) VALUES (p_tenant, p_type, p_message, p_data)
        RETURNING id INTO ev;
    INSERT INTO webhook_deliveries (hook_id, event_id)
        SELECT id, ev FROM webhooks WHERE tenant_id = p_tenant
          AND (p_type = ANY (events) OR split_part(p_type, '.', 1) || '.*' = ANY (events) OR '*' = ANY (events))
        ORDER BY id;
END
$$;

-- instance.state: an instance was made or changed state.
CREATE FUNCTION webhook_instance_state() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.state IS NOT DISTINCT FROM OLD.state THEN
        RETURN NULL;
    END IF;
    PERFORM webhook_emit(NEW.tenant_id, 'instance.state',
        format('instance %s is %s (%s)', NEW.id, NEW.state, NEW.reason),
        jsonb_build_object('id', NEW.id, 'project', (SELECT name FROM projects WHERE id = NEW.project_id),
            'node', NEW.node, 'version', NEW.version, 'generation', NEW.generation, 'state', NEW.state,
            'reason', NEW.reason, 'message', NEW.message, 'retain', NEW.retain,
            'created_at', NEW.created_at, 'last_transition_at', NEW.last_transition_at));
    RETURN NULL;
END
$$;
CREATE TRIGGER webhook_instance_state AFTER INSERT OR UPDATE OF state ON instances
    FOR EACH ROW EXECUTE FUNCTION webhook_instance_state();

-- operation.<kind>: an operation ended (succeeded, failed or canceled);
-- quota.refused besides when it failed with quota_exceeded.
CREATE FUNCTION webhook_operation_done() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    op jsonb;
BEGIN
    IF NEW.state NOT IN ('succeeded', 'failed', 'canceled') OR OLD.state IN ('succeeded', 'failed', 'canceled') THEN
        RETURN NULL;
    END IF;
    op := jsonb_strip_nulls(jsonb_build_object('id', NEW.id, 'kind', NEW.kind, 'target', NEW.target, 'state', NEW.state,
        'result', NEW.result, 'error', NEW.error, 'created_at', NEW.created_at, 'updated_at', NEW.updated_at));
    PERFORM webhook_emit(NEW.tenant_id, 'operation.' || NEW.kind,
        format('%s %s %s', NEW.kind, NEW.id, NEW.state), op);
    IF NEW.error ->> 'code' = 'quota_exceeded' THEN
        PERFORM webhook_emit(NEW.tenant_id, 'quota.refused',
            format('%s %s refused: %s', NEW.kind, NEW.id, NEW.error ->> 'message'), op);
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER webhook_operation_done AFTER UPDATE OF state ON operations
    FOR EACH ROW EXECUTE FUNCTION webhook_operation_done();

-- rollout.step: a project of a rollout changed status.
CREATE FUNCTION webhook_rollout_step() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.status IS NOT DISTINCT FROM OLD.status THEN
        RETURN NULL;
    END IF;
    PERFORM webhook_emit(NEW.tenant_id, 'rollout.step',
        format('rollout %s: project %s is %s', NEW.rollout_id, NEW.project, NEW.status),
        jsonb_build_object('rollout', NEW.rollout_id, 'project', NEW.project, 'status', NEW.status,
            'old_version', NEW.old_version, 'new_version', NEW.new_version, 'message', NEW.message));
    RETURN NULL;
END
$$;
CREATE TRIGGER webhook_rollout_step AFTER INSERT OR UPDATE OF status ON rollout_projects
    FOR EACH ROW EXECUTE FUNCTION webhook_rollout_step();
