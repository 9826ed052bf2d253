-- 0041: Docker inside an instance (runtime/docker.go).
--   projects.docker: the project's instances may run dockerd and nested
--                    containers; only on runtime class 'gvisor' (on runc
--                    dockerd needs privileges of the node's shared kernel).
ALTER TABLE projects ADD COLUMN IF NOT EXISTS docker boolean NOT NULL DEFAULT false;
ALTER TABLE projects ADD CONSTRAINT projects_docker_needs_gvisor CHECK (NOT docker OR runtime_class = 'gvisor');
