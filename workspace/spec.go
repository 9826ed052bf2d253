// Package workspace is the volume feature (strategy 1 of DESIGN.md):
// named, size-limited directories that are bind-mounted into every instance
// of a project at fixed paths and outlive the instances.
//
// Two layers, one package. Volumes is the feature a project sees: a
// volume's declaration in the project's spec (add, remove, list), its
// mounts into instances, its archives in object storage (archive, restore,
// checkpoints) and its home node (follow, handoff). It needs the store's
// project, instance and archive records (Store, HomeStore), the node's
// volume storage (Storage, which Manager is) and object storage, and the
// quota check of stored bytes (Quota). Manager is the node's side: the
// volumes' directories, their mounts, ownership and archive IO.
//
// Terms:
//
//   - owner: who a volume belongs to, "tenant/project": one or more
//     slash-separated segments of [A-Za-z0-9._-], no "." or "..".
//   - volume: one named file system of an owner, declared by a Spec. On the
//     node it is a sparse ext4 image root/<owner>/<name>/disk.img,
//     loop-mounted at root/<owner>/<name>/mnt (the host directory the
//     runtime bind-mounts into instances). The size limit is the file system
//     size: writing past it fails with ENOSPC, inside the instance too.
//   - archive: a volume's content as a zstd-compressed tar (PAX, numeric
//     owners, modes, symlinks, hardlinks, xattrs, mtimes) in an
//     objstore.Store, for moving a volume to another node.
//
// Volumes are never part of a rootfs snapshot: the snapshot code excludes
// their mount paths.
package workspace

import (
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"

	"github.com/envd-dev/envd/api/types"

	"github.com/envd-dev/envd/errdefs"
)

const (
	// DefaultSize is the size of a volume whose Spec has no size.
	DefaultSize int64 = 1 << 30
	// MinSize is the smallest volume; ext4's own metadata needs a few MiB.
	MinSize int64 = 16 << 20
	// MaxSize is the largest volume (the ext4 limit with 4 KiB blocks).
	MaxSize int64 = 16 << 40
)

// Spec of a volume, as declared on a project:
// `--volume NAME:PATH[:UID:GID][:SIZE]`.
type Spec struct {
	Name      string // [a-z0-9][a-z0-9-]{0,62}
	Path      string // absolute, clean mount point inside the instance
	UID, GID  int    // owner of the volume root; default 0:0
	SizeBytes int64  // default DefaultSize (0 means default); at least MinSize
	// PathAdd are directories inside the volume (absolute paths inside the
	// instance, at or under Path) to add to the instance's PATH. Ensure
	// creates them, owned by UID:GID.
	PathAdd []string
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// systemPaths may not be mount points, nor have a volume below them:
// mounting over them hides the image's own files.
var systemPaths = []string{
	"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/usr", "/etc",
	"/var", "/proc", "/sys", "/dev", "/run", "/boot",
}

// ParseSpec parses NAME:PATH, NAME:PATH:SIZE, NAME:PATH:UID:GID or
// NAME:PATH:UID:GID:SIZE, for example "work:/workspace" or
// "tools:/home/dev/.tools:1000:1000:2G". SIZE is bytes with an optional
// binary suffix K, M, G or T (also written Ki/KiB, ...). The result is
// validated.
func ParseSpec(s string) (Spec, error) {
	parts := strings.Split(s, ":")
	var spec Spec
	var size string
	switch len(parts) {
	case 2:
	case 3:
		size = parts[2]
	case 4, 5:
		uid, err := parseID(parts[2])
		if err != nil {
			return Spec{}, fmt.Errorf("volume %q: uid: %w", s, err)
		}
		gid, err := parseID(parts[3])
		if err != nil {
			return Spec{}, fmt.Errorf("volume %q: gid: %w", s, err)
		}
		spec.UID, spec.GID = uid, gid
		if len(parts) == 5 {
			size = parts[4]
		}
	default:
		return Spec{}, fmt.Errorf("volume %q: want NAME:PATH[:UID:GID][:SIZE]: %w", s, errdefs.ErrInvalidArgument)
	}
	spec.Name, spec.Path = parts[0], parts[1]
	spec.SizeBytes = DefaultSize
	if size != "" {
		n, err := types.ParseSize(size)
		if err != nil {
			return Spec{}, fmt.Errorf("volume %q: %w", s, err)
		}
		spec.SizeBytes = n
	}
	if err := spec.Validate(); err != nil {
		return Spec{}, err
	}
	return spec, nil
}

func parseID(s string) (int, error) {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n == 1<<32-1 {
		return 0, fmt.Errorf("%q is not a numeric id: %w", s, errdefs.ErrInvalidArgument)
	}
	return int(n), nil
}

// Validate checks the name grammar, the mount path rules, the ids, the
// size bounds and the PATH additions. The error names the rule and wraps
// errdefs.ErrInvalidArgument.
func (s Spec) Validate() error {
	if !nameRE.MatchString(s.Name) {
		return fmt.Errorf("volume name %q: want [a-z0-9][a-z0-9-]{0,62}: %w", s.Name, errdefs.ErrInvalidArgument)
	}
	if err := checkMountPath(s.Path); err != nil {
		return fmt.Errorf("volume %q: %w", s.Name, err)
	}
	if s.UID < 0 || s.GID < 0 || int64(s.UID) >= 1<<32-1 || int64(s.GID) >= 1<<32-1 {
		return fmt.Errorf("volume %q: owner %d:%d out of range: %w", s.Name, s.UID, s.GID, errdefs.ErrInvalidArgument)
	}
	if s.SizeBytes != 0 && (s.SizeBytes < MinSize || s.SizeBytes > MaxSize) {
		return fmt.Errorf("volume %q: size %d: want %d (16 MiB) to %d (16 TiB) bytes: %w", s.Name, s.SizeBytes, MinSize, MaxSize, errdefs.ErrInvalidArgument)
	}
	for _, p := range s.PathAdd {
		if _, err := s.relPath(p); err != nil {
			return err
		}
	}
	return nil
}

// size returns the effective size.
func (s Spec) size() int64 {
	if s.SizeBytes == 0 {
		return DefaultSize
	}
	return s.SizeBytes
}

// relPath turns a path inside the instance, at or under s.Path, into a
// slash path relative to the volume root ("." for the root).
func (s Spec) relPath(p string) (string, error) {
	if !path.IsAbs(p) || hasDotDot(p) || path.Clean(p) != p || strings.IndexFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 {
		return "", fmt.Errorf("volume %q: PATH addition %q: want a clean absolute path: %w", s.Name, p, errdefs.ErrInvalidArgument)
	}
	if p == s.Path {
		return ".", nil
	}
	if !strings.HasPrefix(p, s.Path+"/") {
		return "", fmt.Errorf("volume %q: PATH addition %q is not under %s: %w", s.Name, p, s.Path, errdefs.ErrInvalidArgument)
	}
	return strings.TrimPrefix(p, s.Path+"/"), nil
}

func checkMountPath(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("mount path is empty: %w", errdefs.ErrInvalidArgument)
	case !path.IsAbs(p):
		return fmt.Errorf("mount path %q is relative: want an absolute path: %w", p, errdefs.ErrInvalidArgument)
	case hasDotDot(p):
		return fmt.Errorf("mount path %q contains \"..\": %w", p, errdefs.ErrInvalidArgument)
	case path.Clean(p) != p:
		return fmt.Errorf("mount path %q is not clean: want %q: %w", p, path.Clean(p), errdefs.ErrInvalidArgument)
	case p == "/":
		return fmt.Errorf("mount path \"/\" would hide the whole image: %w", errdefs.ErrInvalidArgument)
	case strings.IndexFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0:
		return fmt.Errorf("mount path %q contains a control character: %w", p, errdefs.ErrInvalidArgument)
	}
	for _, sys := range systemPaths {
		if p == sys || strings.HasPrefix(p, sys+"/") {
			return fmt.Errorf("mount path %q is at or under system path %s: mounting there hides the image's files: %w", p, sys, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

func hasDotDot(p string) bool {
	for _, seg := range strings.Split(p, "/") {
		if seg == ".." {
			return true
		}
	}
	return false
}

// PathWith returns base (an instance's PATH) with the PATH additions of
// specs in front, in order, without duplicates.
func PathWith(base string, specs ...Spec) string {
	seen := map[string]bool{}
	var out []string
	for _, s := range specs {
		for _, p := range s.PathAdd {
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	for _, p := range strings.Split(base, ":") {
		if p != "" && !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return strings.Join(out, ":")
}
