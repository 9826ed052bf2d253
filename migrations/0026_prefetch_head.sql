-- How many of a project's first reads (projects.prefetch, in first-read
-- order) its recorded instance had read when its first command ended
-- (issue 15, item 8): a lazy start reads those ahead before it reports
-- Running and the rest after its own first command. 0: not known (a list
-- recorded before this column, or no command ran in the window).
ALTER TABLE projects ADD COLUMN IF NOT EXISTS prefetch_head int NOT NULL DEFAULT 0 CHECK (prefetch_head >= 0);
