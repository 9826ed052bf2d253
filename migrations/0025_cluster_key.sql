-- The cluster's forwarding key (issue 10, item 2): nodes sign the requests
-- they forward to one another with it (HMAC-SHA256, api/forwardsign.go), so
-- a client cannot pass itself off as a node. One row; the first node to
-- start makes it.
CREATE TABLE IF NOT EXISTS cluster_key (
    id  int PRIMARY KEY CHECK (id = 1),
    key bytea NOT NULL CHECK (length(key) >= 32)
);
