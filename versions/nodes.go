package versions

import (
	"context"
	"fmt"
)

// RegisterNode records where node name serves the API (replacing what an
// earlier start of it recorded).
func (s Nodes) RegisterNode(ctx context.Context, name, apiURL string) error {
	_, err := s.db.Exec(ctx, `INSERT INTO nodes (name, api_url) VALUES ($1, $2)
		ON CONFLICT (name) DO UPDATE SET api_url = EXCLUDED.api_url, started_at = now()`, name, apiURL)
	if err != nil {
		return translate(err, fmt.Sprintf("register node %q", name))
	}
	return nil
}

// NodeURL is the API address node name registered; ErrNotFound when it
// never did.
func (s Nodes) NodeURL(ctx context.Context, name string) (string, error) {
	var u string
	if err := s.db.QueryRow(ctx, `SELECT api_url FROM nodes WHERE name = $1`, name).Scan(&u); err != nil {
		return "", translate(err, fmt.Sprintf("node %q", name))
	}
	return u, nil
}
