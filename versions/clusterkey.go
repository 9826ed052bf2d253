package versions

import (
	"context"
	"crypto/rand"
)

// ClusterKey is the key nodes sign forwarded requests with: made once, by
// whichever node asks first, and the same for every node of the database.
func (s Nodes) ClusterKey(ctx context.Context) ([]byte, error) {
	fresh := make([]byte, 32)
	if _, err := rand.Read(fresh); err != nil {
		return nil, err
	}
	if _, err := s.db.Exec(ctx, `INSERT INTO cluster_key (id, key) VALUES (1, $1) ON CONFLICT (id) DO NOTHING`, fresh); err != nil {
		return nil, translate(err, "cluster key")
	}
	var key []byte
	if err := s.db.QueryRow(ctx, `SELECT key FROM cluster_key WHERE id = 1`).Scan(&key); err != nil {
		return nil, translate(err, "cluster key")
	}
	return key, nil
}
