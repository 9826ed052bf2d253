-- The declared spec a version of kind build was made from (a
-- types.BuildRequest as JSON), kept so that a migration can build it again
-- on a new base instead of rebasing the version's layers. It goes with its
-- version.
CREATE TABLE version_specs (
    project_id bigint  NOT NULL,
    number     integer NOT NULL,
    spec       jsonb   NOT NULL,
    PRIMARY KEY (project_id, number),
    FOREIGN KEY (project_id, number) REFERENCES versions (project_id, number) ON DELETE CASCADE
);
