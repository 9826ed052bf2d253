-- A secret binding's scheme: 'http' adds the header to plain HTTP requests
-- to the bound host, 'https' to HTTPS requests, for which the node's egress
-- proxy terminates TLS with a certificate of the node's egress CA.
ALTER TABLE secrets ADD COLUMN IF NOT EXISTS scheme text NOT NULL DEFAULT 'http';
