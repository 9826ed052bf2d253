package versions

import (
	"context"
	"encoding/json"
	"fmt"
)

// E2BSandbox is what the E2B-compatible API (api/e2b) keeps of a sandbox
// that its instance does not have.
type E2BSandbox struct {
	Template string            // as the caller named it
	Metadata map[string]string // the caller's
	Env      map[string]string // every command's environment
}

// PutE2BSandbox records what the E2B-compatible API keeps of instance
// instanceID (api/e2b): its template name, metadata and environment. The
// record goes with the instance (ON DELETE CASCADE). An unknown instance
// is ErrFailedPrecondition (the foreign key).
func (s Instances) PutE2BSandbox(ctx context.Context, instanceID string, sb E2BSandbox) error {
	md, err := json.Marshal(stringMap(sb.Metadata))
	if err != nil {
		return err
	}
	env, err := json.Marshal(stringMap(sb.Env))
	if err != nil {
		return err
	}
	_, err = s.db.Exec(ctx, `INSERT INTO e2b_sandboxes (instance_id, template, metadata, env) VALUES ($1, $2, $3, $4)
		ON CONFLICT (instance_id) DO UPDATE SET template = EXCLUDED.template, metadata = EXCLUDED.metadata, env = EXCLUDED.env`,
		instanceID, sb.Template, md, env)
	return translate(err, fmt.Sprintf("e2b sandbox %s", instanceID))
}

// E2BSandboxes returns the records of those of instanceIDs that have one.
func (s Instances) E2BSandboxes(ctx context.Context, instanceIDs []string) (map[string]E2BSandbox, error) {
	out := map[string]E2BSandbox{}
	if len(instanceIDs) == 0 {
		return out, nil
	}
	rows, err := s.db.Query(ctx, `SELECT instance_id, template, metadata, env FROM e2b_sandboxes WHERE instance_id = ANY($1)`, instanceIDs)
	if err != nil {
		return nil, translate(err, "e2b sandboxes")
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var sb E2BSandbox
		var md, env []byte
		if err := rows.Scan(&id, &sb.Template, &md, &env); err != nil {
			return nil, translate(err, "e2b sandboxes")
		}
		if err := json.Unmarshal(md, &sb.Metadata); err != nil {
			return nil, fmt.Errorf("e2b sandbox %s: metadata: %w", id, err)
		}
		if err := json.Unmarshal(env, &sb.Env); err != nil {
			return nil, fmt.Errorf("e2b sandbox %s: env: %w", id, err)
		}
		out[id] = sb
	}
	return out, translate(rows.Err(), "e2b sandboxes")
}

func stringMap(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}
