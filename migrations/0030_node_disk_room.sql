-- A node's room for new writable-layer limits now (thin provisioning): its
-- real free disk less its reserve, times its disk overcommit, less what its
-- limited layers may still fill. Each node refreshes it with its lease;
-- placement passes over a node whose room is smaller than the instance's
-- disk limit. NULL = not told (a node of an earlier version): placement
-- goes by capacity alone.
ALTER TABLE nodes ADD COLUMN IF NOT EXISTS disk_room_bytes bigint;
