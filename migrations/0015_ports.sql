-- 0015: the port proxy (envd/ports.go).
--
-- preview_key: one row, the HMAC-SHA256 key of preview tokens, shared by
-- every node of the database so a token made on one node opens the preview
-- on all. The first node that needs it inserts a random key; later ones
-- read it (versions.Store.PreviewKey).
--
-- project_ports: per project, the ports whose preview (host form) needs no
-- token. Rows go with their project.
CREATE TABLE IF NOT EXISTS preview_key (
    id         boolean PRIMARY KEY DEFAULT true CHECK (id),
    key        bytea NOT NULL CHECK (length(key) >= 32),
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS project_ports (
    project_id bigint NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    port       integer NOT NULL CHECK (port BETWEEN 1 AND 65535),
    public     boolean NOT NULL DEFAULT true,
    PRIMARY KEY (project_id, port)
);
