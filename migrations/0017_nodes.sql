-- Where each node serves the API, so that any node can forward a request
-- about an instance to the node that runs it (one endpoint for clients).
CREATE TABLE nodes (
    name       text PRIMARY KEY,
    api_url    text NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now()
);
