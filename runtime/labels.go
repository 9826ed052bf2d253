package runtime

import "context"

// SetLabels adds or replaces labels on the instance's container (envd
// records the instance's generation there, for fencing).
func (r *Runtime) SetLabels(ctx context.Context, id string, labels map[string]string) error {
	ctx = r.ctx(ctx)
	c, err := r.client.LoadContainer(ctx, id)
	if err != nil {
		return translate(err, "instance %q", id)
	}
	if _, err := c.SetLabels(ctx, labels); err != nil {
		return translate(err, "labels of instance %q", id)
	}
	return nil
}
