// Package snapshotter captures the changes of a container's root filesystem
// (the overlayfs upper directory of its active snapshot) and encodes them as
// OCI image layers.
//
// Terms:
//   - upper dir: the writable directory of the overlay mount; it holds every
//     file the container created or modified, plus overlay's own markers for
//     deletions (whiteouts: 0/0 character devices) and for directories that
//     hide the lower layers (opaque dirs: xattr trusted.overlay.opaque=y).
//   - spool: an uncompressed OCI layer tar of the upper dir. [Spool] writes
//     it in one pass; [Prepare] / [TwoPass.Frozen] / [TwoPass.WriteTar]
//     write the same bytes in passes, so that the container is frozen only
//     for the pass that re-reads metadata and copies what changed since the
//     first. Neither compresses.
//   - layer: the compressed blob written by [Encode] from a spool after the
//     container is thawed, with the digests and sizes a manifest needs.
//
// The save path is: [UpperDir] on the active snapshot's mounts, [Prepare]
// while the container runs, freeze, [TwoPass.Frozen], thaw,
// [TwoPass.WriteTar] to a local file, [Encode], push.
package snapshotter

import (
	"fmt"
	"strings"

	"github.com/containerd/containerd/v2/core/mount"

	"github.com/envd-dev/envd/errdefs"
)

// UpperDir returns the overlay upper directory from an active snapshot's
// mounts. containerd's overlayfs snapshotter gives one mount of type
// "overlay" with an "upperdir=" option; a bind mount (a snapshot without a
// parent) means the whole rootfs is the upper dir, and its source is
// returned.
//
// A read-only view (an overlay without upperdir) or a mount type it does not
// know gives errdefs.ErrInvalidArgument.
func UpperDir(mounts []mount.Mount) (string, error) {
	if len(mounts) == 0 {
		return "", fmt.Errorf("no mounts: %w", errdefs.ErrInvalidArgument)
	}
	for _, m := range mounts {
		typ := m.Type
		// containerd may prefix the type with "/"-separated modifiers for its
		// mount manager ("format/mkdir/overlay"); only the last segment names
		// the filesystem (as in mount.Mount.ReadOnly).
		if i := strings.LastIndex(typ, "/"); i >= 0 {
			typ = typ[i+1:]
		}
		switch typ {
		case "overlay":
			for _, o := range splitOverlayOptions(m.Options) {
				v, ok := strings.CutPrefix(o, "upperdir=")
				if !ok {
					continue
				}
				v = unescapeOverlay(v)
				if v == "" || strings.Contains(v, "{{") {
					return "", fmt.Errorf("overlay upperdir %q is not a plain path: %w", v, errdefs.ErrInvalidArgument)
				}
				return v, nil
			}
			return "", fmt.Errorf("overlay mount of %q has no upperdir (a read-only view?): %w", m.Source, errdefs.ErrInvalidArgument)
		case "bind", "rbind":
			return m.Source, nil
		default:
			for _, o := range m.Options {
				if o == "bind" || o == "rbind" {
					return m.Source, nil
				}
			}
		}
	}
	return "", fmt.Errorf("mount type %q has no upper dir: %w", mounts[0].Type, errdefs.ErrInvalidArgument)
}

// splitOverlayOptions splits option elements that may themselves be
// comma-joined fragments ("lowerdir=a,upperdir=b"), keeping backslash-escaped
// commas inside a value (overlayfs escapes ',' and ':' in paths with '\').
func splitOverlayOptions(opts []string) []string {
	var out []string
	for _, o := range opts {
		start, escaped := 0, false
		for i := 0; i < len(o); i++ {
			switch {
			case escaped:
				escaped = false
			case o[i] == '\\':
				escaped = true
			case o[i] == ',':
				out = append(out, o[start:i])
				start = i + 1
			}
		}
		out = append(out, o[start:])
	}
	return out
}

// unescapeOverlay removes overlayfs's backslash escaping from a path value.
func unescapeOverlay(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	escaped := false
	for i := 0; i < len(s); i++ {
		if !escaped && s[i] == '\\' {
			escaped = true
			continue
		}
		escaped = false
		b.WriteByte(s[i])
	}
	return b.String()
}
