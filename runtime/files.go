package runtime

import (
	"context"
	"path/filepath"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// FileView is what the file API needs of an instance's container besides
// its task and snapshot: the user its processes run as and its volumes.
type FileView struct {
	// User is the process user of the instance's spec (the image's user),
	// ids as the instance sees them.
	User specs.User
	// Binds are the instance's bind mounts other than the files the
	// runtime writes for it (resolv.conf, hosts, hostname): its volumes.
	Binds []specs.Mount
}

// FileView reads the instance's spec.
func (r *Runtime) FileView(ctx context.Context, id string) (FileView, error) {
	ctx = r.ctx(ctx)
	c, err := r.client.LoadContainer(ctx, id)
	if err != nil {
		return FileView{}, translate(err, "instance %q", id)
	}
	spec, err := c.Spec(ctx)
	if err != nil {
		return FileView{}, translate(err, "spec of instance %q", id)
	}
	var v FileView
	if spec.Process != nil {
		v.User = spec.Process.User
	}
	own := r.instanceDir(id) + string(filepath.Separator)
	for _, m := range spec.Mounts {
		if m.Type != "bind" || strings.HasPrefix(m.Source, own) {
			continue
		}
		v.Binds = append(v.Binds, m)
	}
	return v, nil
}
