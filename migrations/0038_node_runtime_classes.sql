-- The runtime classes a node can run (runc, gvisor), recorded at each join:
-- placement sends an instance of a project that names a class only to nodes
-- that run it. NULL = not told (a node of an earlier version): placement
-- does not pass it over; the node itself refuses a class it lacks.
ALTER TABLE nodes ADD COLUMN IF NOT EXISTS runtime_classes text[];
