package runtime

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync"

	"github.com/containerd/containerd/v2/pkg/oci"

	"github.com/envd-dev/envd/errdefs"
)

// Shim groups.
//
// Terms:
//   - shim: the containerd-shim-runc-v2 process that serves an instance's
//     task (creates it through runc or runsc, reaps its processes, copies
//     exec stdio, reports exits). About 4.3 MB of memory each, idle.
//   - shim group: instances served by one shim process. containerd's runc
//     shim starts a process per task unless the task's spec carries the
//     annotation ShimGroupAnnotation: the shim's socket address is derived
//     from the group's name, and a task whose group's shim is listening
//     joins it instead of starting another (containerd v2,
//     cmd/containerd-shim-runc-v2/manager).
//   - group key (InstanceSpec.ShimGroup): which instances may share a
//     shim; "" = a shim of its own. The runtime class is part of every
//     group, so runc and gVisor instances (different shim options) never
//     share one.
//   - group size (Config.ShimGroupSize): at most that many containers,
//     with or without a task, carry one group's name. A container keeps
//     its group for all its starts (the annotation is in its spec), so a
//     stopped instance holds its place.
//
// The cost is the blast radius: a shim that dies (killed, crashed, OOM
// killed) takes the tasks of every instance of its group with it.
// containerd then runs the shim's delete for each of them, which kills
// what is left of their processes, and forgets their tasks: such an
// instance's container is kept with no task (Status.Task ""), and the
// instances of other groups are not touched.
const ShimGroupAnnotation = "io.containerd.runc.v2.group"

// LabelShimGroup is the container label holding the group an instance's
// shim belongs to ("" or absent: a shim of its own).
const LabelShimGroup = "envd.shim-group"

// labelShimKey holds the hashed group key and class; the containers of one
// key are found by it when a group is chosen.
const labelShimKey = "envd.shim-key"

// DefaultShimGroupSize is the node default of Config.ShimGroupSize: 1, a
// shim per instance; grouping (16 share a shim's ~4.3 MB) is opt-in. A
// task created in a group whose shim was exiting failed ("ttrpc: closed")
// or died with it; the group gates (shimgate.go) order the two, but with
// 16 as the default the full e2e suite still failed (a create's "ttrpc:
// closed", a volume busy, a dropped connection). See
// docs/notes/lifecycle.md, "Shim groups".
const DefaultShimGroupSize = 1

// shimGroups hands out group places. pending counts the places handed out
// whose container is not yet made (or failed to be): containerd's list of
// containers holds the others.
type shimGroups struct {
	mu      sync.Mutex
	pending map[string]int // group name -> places being taken
}

// shimGroup picks the group of a new container of class with group key
// key: the lowest-numbered group of the key with a free place. It returns
// the group's place (a zero shimPlace = no group: a shim of its own) and
// a release that the caller runs once the container is made or has failed
// to be.
func (r *Runtime) shimGroup(ctx context.Context, key string, class Class) (shimPlace, func(), error) {
	size := r.cfg.ShimGroupSize
	if key == "" || size <= 1 {
		return shimPlace{}, func() {}, nil
	}
	sum := sha256.Sum256([]byte(string(class) + "\x00" + key))
	hkey := string(class) + "-" + hex.EncodeToString(sum[:8])
	g := &r.groups
	g.mu.Lock()
	defer g.mu.Unlock()
	cs, err := r.client.ContainerService().List(ctx, fmt.Sprintf("labels.%q==%q", labelShimKey, hkey))
	if err != nil {
		return shimPlace{}, nil, translate(err, "list the containers of shim group key %q", key)
	}
	used := map[string]int{}
	for _, c := range cs {
		used[c.Labels[LabelShimGroup]]++
	}
	var name string
	for n := 0; ; n++ {
		// The scope keeps two runtimes on one containerd apart.
		name = "envd-" + r.scope[:12] + "-" + hkey + "-" + strconv.Itoa(n)
		if used[name]+g.pending[name] < size {
			break
		}
	}
	if g.pending == nil {
		g.pending = map[string]int{}
	}
	g.pending[name]++
	release := func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.pending[name]--; g.pending[name] <= 0 {
			delete(g.pending, name)
		}
	}
	return shimPlace{group: name, key: hkey}, release, nil
}

// shimPlace is a container's place in a shim group.
type shimPlace struct {
	group string // the group's name, "" = a shim of its own
	key   string // the hashed group key and class
}

// spec puts the container into its group: labels get the group and key,
// and the returned option puts the group's annotation into the spec.
func (p shimPlace) spec(labels map[string]string) oci.SpecOpts {
	if p.group == "" {
		return oci.Compose()
	}
	labels[LabelShimGroup] = p.group
	labels[labelShimKey] = p.key
	return oci.WithAnnotations(map[string]string{ShimGroupAnnotation: p.group})
}

// ShimGroupOf is the shim group instance id was made in ("" = a shim of
// its own).
func (r *Runtime) ShimGroupOf(ctx context.Context, id string) (string, error) {
	info, err := r.containerInfo(r.ctx(ctx), id)
	if err != nil {
		return "", err
	}
	return info.Labels[LabelShimGroup], nil
}

// checkShimGroupSize validates Config.ShimGroupSize and sets its default.
func checkShimGroupSize(cfg *Config) error {
	if cfg.ShimGroupSize == 0 {
		cfg.ShimGroupSize = DefaultShimGroupSize
	}
	if cfg.ShimGroupSize < 1 {
		return fmt.Errorf("shim group size %d: 1 or more: %w", cfg.ShimGroupSize, errdefs.ErrInvalidArgument)
	}
	return nil
}
