package files

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/errdefs"
)

// Mount is one mount of a snapshot as the runtime describes it (the shape
// of containerd's mount.Mount, which this package does not import so that
// the API, which serves *Root, builds without containerd).
type Mount struct {
	Type    string
	Source  string
	Options []string
}

// MountFunc mounts m at target; the runtime's own mount code (for
// containerd's, mount.Mount.Mount: it knows how to pass long overlay
// options) is given to OpenSnapshot by its caller.
type MountFunc func(m Mount, target string) error

// Bind is a bind mount of the instance (a volume): Source on the node at
// Destination in the instance.
type Bind struct {
	Source, Destination string
}

// OpenSnapshot opens the retained layer of a stopped instance read-only,
// without starting it: the active snapshot's mounts ms (one overlay mount,
// or a bind of a single directory) are mounted by mountAt read-only with the upper
// dir as the topmost lower layer (so its whiteouts and opaque directories
// still hide the image's entries, and nothing can be written to it), the
// binds (volumes) are bound read-only at their destinations, and a clone
// of the tree (open_tree) detached from the node's mount table replaces
// it at once: it lives as long as the Root holds it and is seen by no one
// else. tmpParent is a node
// directory for the short-lived mount point. The Root is read-only with
// reason.
func OpenSnapshot(ms []Mount, mountAt MountFunc, binds []Bind, tmpParent string, id Identity, reason string) (*Root, error) {
	if len(ms) != 1 {
		return nil, fmt.Errorf("snapshot has %d mounts, one expected: %w", len(ms), errdefs.ErrFailedPrecondition)
	}
	m, err := readOnly(ms[0])
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(tmpParent, "files-ro-")
	if err != nil {
		return nil, err
	}
	defer os.Remove(dir)
	if err := mountAt(m, dir); err != nil {
		return nil, fmt.Errorf("mount the retained layer read-only: %w", err)
	}
	defer func() { _ = unix.Unmount(dir, unix.MNT_DETACH) }()
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	staging, err := openFD(fd, id)
	if err != nil {
		return nil, err
	}
	defer staging.Close()
	for _, b := range binds {
		if err := staging.bindReadOnly(b); err != nil {
			return nil, err
		}
	}
	// A detached copy of the whole tree, volumes included (a lazy unmount
	// would cut the volumes off the layer): the Root holds it, the mount
	// table forgets it.
	tree, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return nil, fmt.Errorf("detach the retained layer's mount: %w", err)
	}
	return openFD(tree, id, ReadOnly(reason))
}

// readOnly turns an active snapshot's mount into a read-only one of the
// same tree.
func readOnly(m Mount) (Mount, error) {
	switch m.Type {
	case "bind", "rbind":
		return Mount{Type: "bind", Source: m.Source, Options: []string{"rbind", "ro"}}, nil
	case "overlay":
	default:
		return Mount{}, fmt.Errorf("snapshot mount of type %q: %w", m.Type, errdefs.ErrFailedPrecondition)
	}
	var upper, lower string
	opts := []string{"ro"}
	for _, o := range m.Options {
		switch {
		case strings.HasPrefix(o, "upperdir="):
			upper = strings.TrimPrefix(o, "upperdir=")
		case strings.HasPrefix(o, "lowerdir="):
			lower = strings.TrimPrefix(o, "lowerdir=")
		case strings.HasPrefix(o, "workdir="), o == "rw", o == "volatile", strings.HasPrefix(o, "index="):
		default:
			opts = append(opts, o)
		}
	}
	if upper == "" {
		// A view already: read-only as it is.
		return Mount{Type: "overlay", Source: "overlay", Options: append(opts, "lowerdir="+lower)}, nil
	}
	layers := upper
	if lower != "" {
		layers += ":" + lower
	}
	return Mount{Type: "overlay", Source: "overlay", Options: append(opts, "lowerdir="+layers)}, nil
}

// bindReadOnly binds b.Source read-only at b.Destination resolved in the
// root (never through a symlink out of it). A destination missing from the
// layer is skipped: the instance never ran with it.
func (r *Root) bindReadOnly(b Bind) error {
	rel, err := Clean(b.Destination)
	if err != nil || rel == "." {
		return nil
	}
	fd, err := r.resolve(rel, unix.O_PATH|unix.O_DIRECTORY, true)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("volume mount point %s: %w", b.Destination, err)
	}
	defer unix.Close(fd)
	if err := unix.Mount(b.Source, procPath(fd), "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind volume %s: %w", b.Destination, err)
	}
	// The new mount is what the path resolves to now.
	nfd, err := r.resolve(rel, unix.O_PATH|unix.O_DIRECTORY, true)
	if err != nil {
		return fmt.Errorf("volume mount point %s: %w", b.Destination, err)
	}
	defer unix.Close(nfd)
	if err := unix.Mount("", procPath(nfd), "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		return fmt.Errorf("make volume %s read-only: %w", b.Destination, err)
	}
	return nil
}
