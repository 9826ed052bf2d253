-- The certificate (DER) each node serves its API with, recorded when it
-- joins and again when it changes: a node forwarding a request to another
-- over https trusts exactly that certificate (envd/node/peers.go), so the
-- nodes' default self-signed certificates work without a shared CA.
-- NULL: plain HTTP, or a node of an earlier version.
ALTER TABLE nodes ADD COLUMN tls_cert bytea;
