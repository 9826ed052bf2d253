package workspace

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/internal/mountinfo"
)

const (
	imageName = "disk.img"
	mountName = "mnt"
	// cleanupTimeout bounds cleanup that runs after ctx is canceled.
	cleanupTimeout = 30 * time.Second
)

// volumeFiles are the only names a volume directory holds; a directory
// holding anything else is an owner directory, not a volume.
var volumeFiles = map[string]bool{
	imageName: true, mountName: true,
	imageName + ".new": true, mountName + ".new": true,
}

var ownerSegRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// Manager creates, mounts, measures, archives, restores and removes the
// volumes of one node. It serializes operations on one volume within the
// process; one envd process owns a root.
type Manager struct {
	root string

	mu    sync.Mutex
	locks map[string]*sync.Mutex
}

// Usage of a volume's file system.
type Usage struct {
	UsedBytes  int64 // bytes in use by files and directories
	SizeBytes  int64 // the volume's size (its image)
	AvailBytes int64 // bytes still writable
}

// NewManager returns a Manager keeping volumes under root (DATA_DIR/volumes),
// created if missing. Must run as root (mount).
func NewManager(root string) (*Manager, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("volumes root %q: %w", root, err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("volumes root: %w", err)
	}
	return &Manager{root: abs, locks: map[string]*sync.Mutex{}}, nil
}

// Root returns the directory the volumes live under.
func (m *Manager) Root() string { return m.root }

// volume is the on-disk location of one volume.
type volume struct {
	owner, name string
	dir         string // root/<owner>/<name>
}

func (v volume) image() string { return filepath.Join(v.dir, imageName) }
func (v volume) mnt() string   { return filepath.Join(v.dir, mountName) }
func (v volume) String() string {
	return fmt.Sprintf("volume %q of %q", v.name, v.owner)
}

func validateOwner(owner string) error {
	if owner == "" {
		return fmt.Errorf("volume owner is empty: %w", errdefs.ErrInvalidArgument)
	}
	for _, seg := range strings.Split(owner, "/") {
		if !ownerSegRE.MatchString(seg) || seg == "." || seg == ".." {
			return fmt.Errorf("volume owner %q: want segments of [A-Za-z0-9._-] separated by /: %w", owner, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// locate validates owner and name and returns the volume's location. It
// refuses locations that collide with another owner's directories: the
// layout root/<owner>/<name> lets owner "a" with volume "b" and owner "a/b"
// meet in one directory.
func (m *Manager) locate(owner, name string) (volume, error) {
	if err := validateOwner(owner); err != nil {
		return volume{}, err
	}
	if !nameRE.MatchString(name) {
		return volume{}, fmt.Errorf("volume name %q: want [a-z0-9][a-z0-9-]{0,62}: %w", name, errdefs.ErrInvalidArgument)
	}
	v := volume{owner: owner, name: name, dir: filepath.Join(m.root, filepath.FromSlash(owner), name)}
	// No ancestor between root and v.dir may be a volume.
	for d := filepath.Dir(v.dir); d != m.root; d = filepath.Dir(d) {
		if _, err := os.Lstat(filepath.Join(d, imageName)); err == nil {
			return volume{}, fmt.Errorf("%s: %s is a volume of another owner: %w", v, d, errdefs.ErrConflict)
		}
	}
	// v.dir itself must be a volume directory if it exists.
	ents, err := os.ReadDir(v.dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return volume{}, fmt.Errorf("%s: %w", v, err)
	}
	for _, e := range ents {
		if !volumeFiles[e.Name()] {
			return volume{}, fmt.Errorf("%s: %s holds another owner's volumes: %w", v, v.dir, errdefs.ErrConflict)
		}
	}
	return v, nil
}

// lock serializes operations on one volume.
func (m *Manager) lock(v volume) func() {
	m.mu.Lock()
	l, ok := m.locks[v.dir]
	if !ok {
		l = &sync.Mutex{}
		m.locks[v.dir] = l
	}
	m.mu.Unlock()
	l.Lock()
	return l.Unlock
}

// Ensure creates the volume if missing and makes sure it is mounted (after
// a host reboot or an envd restart the mount may be gone), with its root
// owned by s.UID:s.GID and the PATH addition directories present. It is
// idempotent and returns the host directory to bind-mount at s.Path.
//
// The size of an existing volume is not changed when s.SizeBytes differs;
// Usage reports the real size.
func (m *Manager) Ensure(ctx context.Context, owner string, s Spec) (string, error) {
	if err := s.Validate(); err != nil {
		return "", err
	}
	v, err := m.locate(owner, s.Name)
	if err != nil {
		return "", err
	}
	defer m.lock(v)()
	if err := m.ensure(ctx, v, s, true); err != nil {
		return "", err
	}
	return v.mnt(), nil
}

// ensure does Ensure's work with the volume locked. With create false, a
// missing volume is errdefs.ErrNotFound.
func (m *Manager) ensure(ctx context.Context, v volume, s Spec, create bool) error {
	if _, err := os.Stat(v.image()); err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%s: %w", v, err)
		}
		if !create {
			return fmt.Errorf("%s: %w", v, errdefs.ErrNotFound)
		}
		if err := os.MkdirAll(v.dir, 0o700); err != nil {
			return fmt.Errorf("%s: %w", v, err)
		}
		if err := makeImage(ctx, v.image(), s); err != nil {
			return fmt.Errorf("%s: %w", v, err)
		}
	}
	if err := mountAt(ctx, v.image(), v.mnt()); err != nil {
		return fmt.Errorf("%s: %w", v, err)
	}
	thaw(v.mnt()) // left frozen by a checkpoint that died (checkpoint.go)
	if err := prepareRoot(v.mnt(), s); err != nil {
		return fmt.Errorf("%s: %w", v, err)
	}
	return nil
}

// makeImage creates a sparse ext4 image of s's size at img: built as
// img.new, fsynced, renamed into place, so a crash never leaves a
// half-made image under the real name.
//
// mkfs.ext4 (e2fsprogs 1.47): -F because the target is a regular file, -m 0
// because no blocks need reserving for root in a user volume, -E
// root_owner=UID:GID for the owner of the root directory. On a regular file
// mke2fs discards (punches holes), so the image stays sparse: a fresh 1 GiB
// volume takes a few MiB of host disk.
func makeImage(ctx context.Context, img string, s Spec) error {
	tmp := img + ".new"
	_ = os.Remove(tmp)
	if err := buildImage(ctx, tmp, s); err != nil {
		return err
	}
	if err := os.Rename(tmp, img); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return syncFile(filepath.Dir(img))
}

// buildImage makes a fresh, fsynced ext4 image at tmp.
func buildImage(ctx context.Context, tmp string, s Spec) error {
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if err := f.Truncate(s.size()); err != nil {
		f.Close()
		_ = os.Remove(tmp)
		return fmt.Errorf("size image: %w", err)
	}
	if err := f.Close(); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	out, err := exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", "-m", "0",
		"-E", fmt.Sprintf("root_owner=%d:%d", s.UID, s.GID), tmp).CombinedOutput()
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("mkfs.ext4: %w: %s", err, strings.TrimSpace(string(out)))
	}
	if err := syncFile(tmp); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}

// mountAt mounts img on dir unless it already is.
func mountAt(ctx context.Context, img, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	mi, ok, err := mountedAt(dir)
	if err != nil {
		return err
	}
	if ok {
		if back := loopBacking(mi.Source); back != "" && back != img {
			return fmt.Errorf("%s is mounted from %s, not %s: %w", dir, back, img, errdefs.ErrFailedPrecondition)
		}
		return nil
	}
	return mountImage(ctx, img, dir)
}

// prepareRoot applies the spec's owner to the volume root and creates the
// PATH addition directories. All of it goes through os.Root: the content
// is the user's, and a symlink placed inside must not lead host-side
// operations out of the volume.
func prepareRoot(mnt string, s Spec) error {
	r, err := os.OpenRoot(mnt)
	if err != nil {
		return err
	}
	defer r.Close()
	st, err := r.Lstat(".")
	if err != nil {
		return err
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && (int(sys.Uid) != s.UID || int(sys.Gid) != s.GID) {
		if err := r.Lchown(".", s.UID, s.GID); err != nil {
			return fmt.Errorf("chown volume root: %w", err)
		}
	}
	for _, p := range s.PathAdd {
		rel, err := s.relPath(p)
		if err != nil || rel == "." {
			continue
		}
		if err := mkdirAllOwned(r, rel, s.UID, s.GID); err != nil {
			return fmt.Errorf("PATH directory %s: %w", p, err)
		}
	}
	return nil
}

// mkdirAllOwned creates rel and its missing parents in r, owned by uid:gid.
func mkdirAllOwned(r *os.Root, rel string, uid, gid int) error {
	parts := strings.Split(rel, "/")
	for i := range parts {
		p := strings.Join(parts[:i+1], "/")
		err := r.Mkdir(p, 0o755)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return err
		}
		if err := r.Lchown(p, uid, gid); err != nil {
			return err
		}
	}
	return nil
}

// Usage reports the used and total bytes of an existing volume, mounting
// it if needed. errdefs.ErrNotFound when the volume does not exist.
func (m *Manager) Usage(ctx context.Context, owner string, s Spec) (Usage, error) {
	if err := s.Validate(); err != nil {
		return Usage{}, err
	}
	v, err := m.locate(owner, s.Name)
	if err != nil {
		return Usage{}, err
	}
	defer m.lock(v)()
	if err := m.ensure(ctx, v, s, false); err != nil {
		return Usage{}, err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(v.mnt(), &st); err != nil {
		return Usage{}, fmt.Errorf("%s: statfs: %w", v, err)
	}
	img, err := os.Stat(v.image())
	if err != nil {
		return Usage{}, fmt.Errorf("%s: %w", v, err)
	}
	bs := int64(st.Bsize)
	return Usage{
		UsedBytes:  (int64(st.Blocks) - int64(st.Bfree)) * bs,
		SizeBytes:  img.Size(),
		AvailBytes: int64(st.Bavail) * bs,
	}, nil
}

// Remove unmounts the volume and deletes its image. A missing volume is
// fine. A volume in use (open files under its host directory, or mounted
// into a running instance) is refused with errdefs.ErrFailedPrecondition
// and left as it was.
func (m *Manager) Remove(ctx context.Context, owner, name string) error {
	v, err := m.locate(owner, name)
	if err != nil {
		return err
	}
	defer m.lock(v)()
	for _, n := range []string{mountName + ".new", mountName} {
		if err := unmount(filepath.Join(v.dir, n)); err != nil {
			return fmt.Errorf("remove %s: %w", v, err)
		}
	}
	// Unmounted here but still attached: mounted in a namespace that no
	// longer shows it at our mount point. Deleting would lose its writes.
	if err := detached(v.image()); err != nil {
		return fmt.Errorf("remove %s: %w", v, err)
	}
	if err := os.RemoveAll(v.dir); err != nil {
		return fmt.Errorf("remove %s: %w", v, err)
	}
	// Prune owner directories left empty.
	for d := filepath.Dir(v.dir); d != m.root; d = filepath.Dir(d) {
		if os.Remove(d) != nil {
			break
		}
	}
	return nil
}

// List returns the names of owner's volumes, sorted.
func (m *Manager) List(ctx context.Context, owner string) ([]string, error) {
	if err := validateOwner(owner); err != nil {
		return nil, err
	}
	dir := filepath.Join(m.root, filepath.FromSlash(owner))
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return []string{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("volumes of %q: %w", owner, err)
	}
	names := []string{}
	for _, e := range ents {
		if !e.IsDir() || !nameRE.MatchString(e.Name()) {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, e.Name(), imageName)); err == nil {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names, nil
}

func syncFile(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", p, err)
	}
	return nil
}

// Detach unmounts every volume of this manager from the host, leaving the
// images in place (Ensure mounts them again). It is for a node going away:
// instances that still have a volume bind-mounted keep their own mount.
func (m *Manager) Detach(ctx context.Context) error {
	mps, err := mountinfo.Under(m.root)
	if err != nil {
		return err
	}
	var errs []error
	for _, mp := range mps {
		if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", mp, err))
		}
	}
	return errors.Join(errs...)
}

// Owners returns the owners that have volumes on this node, sorted: with
// List, what an orphan scan compares with the projects that still exist.
func (m *Manager) Owners(ctx context.Context) ([]string, error) {
	owners := map[string]bool{}
	err := filepath.WalkDir(m.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !d.IsDir() {
			return nil
		}
		if _, err := os.Lstat(filepath.Join(p, imageName)); err != nil {
			return nil
		}
		// A volume directory: never walk into its mounted file system.
		if owner, err := filepath.Rel(m.root, filepath.Dir(p)); err == nil && owner != "." {
			owners[filepath.ToSlash(owner)] = true
		}
		return filepath.SkipDir
	})
	if err != nil {
		return nil, fmt.Errorf("volume owners: %w", err)
	}
	out := make([]string, 0, len(owners))
	for o := range owners {
		out = append(out, o)
	}
	sort.Strings(out)
	return out, nil
}
