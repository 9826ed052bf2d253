-- 0010: a project's network policy for its instances.
--   egress:            "open" (the internet; private ranges dropped), "none",
--                      or "allow:ENTRY,..." (IPv4 CIDRs, addresses, host
--                      names), as runtime.ParseEgress reads it.
--   isolate_instances: the project's instances cannot connect to each other
--                      either (by default they can; other projects' never).
ALTER TABLE projects ADD COLUMN IF NOT EXISTS egress text NOT NULL DEFAULT 'open';
ALTER TABLE projects ADD COLUMN IF NOT EXISTS isolate_instances boolean NOT NULL DEFAULT false;
