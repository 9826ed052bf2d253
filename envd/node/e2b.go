package node

import (
	"context"

	"github.com/envd-dev/envd/api/e2b"
	"github.com/envd-dev/envd/versions"
)

// e2bStore keeps the E2B API's sandbox records in the metadata store.
type e2bStore struct{ s versions.Instances }

func (e e2bStore) PutE2BSandbox(ctx context.Context, instanceID string, sb e2b.Sandbox) error {
	return e.s.PutE2BSandbox(ctx, instanceID, versions.E2BSandbox(sb))
}

func (e e2bStore) E2BSandboxes(ctx context.Context, ids []string) (map[string]e2b.Sandbox, error) {
	recs, err := e.s.E2BSandboxes(ctx, ids)
	out := make(map[string]e2b.Sandbox, len(recs))
	for id, r := range recs {
		out[id] = e2b.Sandbox(r)
	}
	return out, err
}

// e2bServer returns the E2B-compatible API (api/e2b, under /e2b): a client
// of this node's own API at *url with the caller's token, as /mcp is. Its
// commands end when the node closes.
func (n *Node) e2bServer(url *string) *e2b.Server {
	clients := n.mcpClients(url)
	s := e2b.New(func(token string) (e2b.Envd, error) {
		c, err := clients(token)
		if err != nil {
			return nil, err
		}
		return c, nil
	}, e2bStore{n.db.store.Instances})
	n.onClose(func(context.Context) error { s.Close(); return nil })
	return s
}
