package objstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/envd-dev/envd/errdefs"
)

// dirTemp is the directory under a Dir's root that holds objects being
// written. Keys whose first segment is dirTemp are refused by Dir.
const dirTemp = ".envd-tmp"

// Dir is a Store keeping each object as a file root/<key>. Objects are
// written to a temp file in the same file system, fsynced, renamed into
// place, and the parent directory fsynced, so a crash leaves the old object
// or the new one, never a torn one (and at most a stray temp file, removed
// by the next NewDir).
//
// Unlike S3, a directory cannot hold both an object "a" and an object
// "a/b": such a Put fails with errdefs.ErrConflict.
type Dir struct {
	root string
}

var _ Store = (*Dir)(nil)

// NewDir returns a Dir storing under root, creating root if missing.
func NewDir(root string) (*Dir, error) {
	if root == "" {
		return nil, fmt.Errorf("object store directory: empty path: %w", errdefs.ErrInvalidArgument)
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("object store directory %q: %w", root, err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("object store directory: %w", err)
	}
	// Temp files of writes interrupted by a crash are garbage.
	if err := os.RemoveAll(filepath.Join(abs, dirTemp)); err != nil {
		return nil, fmt.Errorf("object store directory: clean temp: %w", err)
	}
	if err := os.Mkdir(filepath.Join(abs, dirTemp), 0o700); err != nil {
		return nil, fmt.Errorf("object store directory: %w", err)
	}
	return &Dir{root: abs}, nil
}

// Root returns the directory the objects are stored in.
func (d *Dir) Root() string { return d.root }

func (d *Dir) path(key string) (string, error) {
	if err := ValidateKey(key); err != nil {
		return "", err
	}
	if first, _, _ := strings.Cut(key, "/"); first == dirTemp {
		return "", fmt.Errorf("object key %q: %q is reserved: %w", key, dirTemp, errdefs.ErrInvalidArgument)
	}
	return filepath.Join(d.root, filepath.FromSlash(key)), nil
}

// Put implements Store.
func (d *Dir) Put(ctx context.Context, key string, r io.Reader, size int64) (err error) {
	p, err := d.path(key)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		if errors.Is(err, syscall.ENOTDIR) {
			return fmt.Errorf("put %q: a parent is an object: %w", key, errdefs.ErrConflict)
		}
		return fmt.Errorf("put %q: %w", key, err)
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := filepath.Join(d.root, dirTemp, hex.EncodeToString(rnd[:]))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("put %q: %w", key, err)
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	cr := &countingReader{r: ctxReader{ctx: ctx, r: r}}
	if _, err := io.Copy(f, cr); err != nil {
		return fmt.Errorf("put %q: %w", key, err)
	}
	if size >= 0 && cr.n != size {
		return fmt.Errorf("put %q: read %d bytes, want %d: %w", key, cr.n, size, errdefs.ErrInvalidArgument)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("put %q: %w", key, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("put %q: %w", key, err)
	}
	if err := os.Rename(tmp, p); err != nil {
		if errors.Is(err, syscall.EISDIR) || errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST) {
			return fmt.Errorf("put %q: keys exist below it: %w", key, errdefs.ErrConflict)
		}
		return fmt.Errorf("put %q: %w", key, err)
	}
	return syncDir(filepath.Dir(p))
}

// Get implements Store.
func (d *Dir) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	p, err := d.path(key)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return nil, fmt.Errorf("object %q: %w", key, errdefs.ErrNotFound)
		}
		return nil, fmt.Errorf("get %q: %w", key, err)
	}
	if st, err := f.Stat(); err != nil || st.IsDir() {
		_ = f.Close()
		return nil, fmt.Errorf("object %q: %w", key, errdefs.ErrNotFound)
	}
	return f, nil
}

// Delete implements Store. Parent directories left empty are removed.
func (d *Dir) Delete(ctx context.Context, key string) error {
	p, err := d.path(key)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	st, err := os.Lstat(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return nil
		}
		return fmt.Errorf("delete %q: %w", key, err)
	}
	if st.IsDir() { // a "directory" of other keys, not an object
		return nil
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete %q: %w", key, err)
	}
	// Prune now-empty parents; failures (not empty, a racing Put) are fine.
	for dir := filepath.Dir(p); dir != d.root && strings.HasPrefix(dir, d.root+string(filepath.Separator)); dir = filepath.Dir(dir) {
		if os.Remove(dir) != nil {
			break
		}
	}
	return nil
}

// List implements Store.
func (d *Dir) List(ctx context.Context, prefix string) ([]ObjectInfo, error) {
	if err := validatePrefix(prefix); err != nil {
		return nil, err
	}
	// Walk only the deepest directory the prefix names.
	start := d.root
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		start = filepath.Join(d.root, filepath.FromSlash(prefix[:i]))
	}
	var out []ObjectInfo
	err := filepath.WalkDir(start, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(d.root, p)
		if err != nil {
			return err
		}
		key := filepath.ToSlash(rel)
		if de.IsDir() {
			if key == dirTemp {
				return fs.SkipDir
			}
			// Skip directories that cannot hold a matching key.
			if key != "." && !strings.HasPrefix(key+"/", prefix) && !strings.HasPrefix(prefix, key+"/") {
				return fs.SkipDir
			}
			return nil
		}
		if !de.Type().IsRegular() || !strings.HasPrefix(key, prefix) {
			return nil
		}
		info, err := de.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) { // deleted meanwhile
				return nil
			}
			return err
		}
		out = append(out, ObjectInfo{Key: key, Size: info.Size(), Modified: info.ModTime()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list %q: %w", prefix, err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}

// ctxReader stops a copy once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
