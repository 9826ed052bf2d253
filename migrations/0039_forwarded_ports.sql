-- 0039: forwarded ports (a devcontainer.json's forwardPorts and
-- portsAttributes, types.ProjectPorts.Forwarded).
--
-- A project_ports row is now a port the project has settings for: public
-- (no preview token), forwarded (named for the project's tools, with a
-- label and a scheme), or both. Rows that are neither are deleted.
ALTER TABLE project_ports
    ADD COLUMN forwarded boolean NOT NULL DEFAULT false,
    ADD COLUMN label     text NOT NULL DEFAULT '' CHECK (length(label) <= 128),
    ADD COLUMN scheme    text NOT NULL DEFAULT '' CHECK (scheme IN ('', 'http', 'https'));
