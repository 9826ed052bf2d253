package envd

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/envd-dev/envd/registry/memimage"
)

// DefaultMemoryCacheBytes is how much of the memory images this node wrote
// it keeps (Config.MemoryCacheBytes): a few images of dev-sized memory.
const DefaultMemoryCacheBytes = 2 << 30

// localMemory keeps the memory images this node's checkpoints wrote, by
// manifest digest, after their push: a resume or a wake on the same node
// links the files from here instead of pulling the image back from the
// registry (issue 25: same-node resume within 0.5 s; a pull of 256 MiB
// through the registry alone took longer than that here).
//
// An entry is a directory of hard links to the files runsc wrote (the
// push read them, nothing writes them again: runsc's restore opens them
// read-only), so keeping it costs no copy, and the disk it holds is what
// the image would have held until its removal. Entries are the node's own
// (written by its engine into its work dir); a take checks their names and
// sizes against the artifact's index, and anything else falls back to the
// pull. The oldest used entries go when the total passes max.
type localMemory struct {
	dir string
	max int64
	log *slog.Logger

	mu sync.Mutex // one keep or take at a time: eviction against links
}

// newLocalMemory is the cache in dir (made by the first keep); what an earlier process
// left half made there is removed. max <= 0: no cache (nil).
func newLocalMemory(dir string, max int64, log *slog.Logger) *localMemory {
	if max <= 0 {
		return nil
	}
	ents, _ := os.ReadDir(dir) // made by the first keep
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			_ = os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
	return &localMemory{dir: dir, max: max, log: log}
}

// entry is the directory of the image with manifest digest.
func (l *localMemory) entry(digest string) string {
	return filepath.Join(l.dir, strings.ReplaceAll(digest, ":", "-"))
}

// keep links the files of image directory src (just pushed as manifest
// digest) into the cache. Failures are logged, not returned: without the
// entry a resume pulls, as before.
func (l *localMemory) keep(digest, src string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.keepLocked(digest, src); err != nil {
		l.log.Warn("memory image cache: not kept", "image", digest, "err", err)
	}
}

func (l *localMemory) keepLocked(digest, src string) error {
	dst := l.entry(digest)
	if _, err := os.Stat(dst); err == nil {
		return nil
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	var size int64
	for _, e := range ents {
		info, err := e.Info()
		if err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return fmt.Errorf("%s is not a regular file", e.Name())
		}
		size += info.Size()
	}
	if size > l.max {
		return fmt.Errorf("%d bytes, more than the cache's %d", size, l.max)
	}
	if err := os.MkdirAll(l.dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(l.dir, ".keep-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp) // gone after the rename
	for _, e := range ents {
		if err := os.Link(filepath.Join(src, e.Name()), filepath.Join(tmp, e.Name())); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp, dst); err != nil {
		return err
	}
	return l.evictLocked(dst)
}

// evictLocked removes the least recently used entries but keep until the
// cache holds at most max bytes.
func (l *localMemory) evictLocked(keep string) error {
	ents, err := os.ReadDir(l.dir)
	if err != nil {
		return err
	}
	type entry struct {
		path string
		used time.Time
		size int64
	}
	var all []entry
	var total int64
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") || !e.IsDir() {
			continue
		}
		p := filepath.Join(l.dir, e.Name())
		info, err := e.Info()
		if err != nil {
			continue
		}
		n := dirBytes(p)
		all = append(all, entry{p, info.ModTime(), n})
		total += n
	}
	slices.SortFunc(all, func(a, b entry) int { return a.used.Compare(b.used) })
	var errs []error
	for _, e := range all {
		if total <= l.max {
			break
		}
		if e.path == keep {
			continue
		}
		if err := os.RemoveAll(e.path); err != nil {
			errs = append(errs, err)
			continue
		}
		total -= e.size
	}
	return errors.Join(errs...)
}

func dirBytes(dir string) int64 {
	ents, _ := os.ReadDir(dir)
	var n int64
	for _, e := range ents {
		if info, err := e.Info(); err == nil {
			n += info.Size()
		}
	}
	return n
}

// take links the cached files of a into dst (which must not exist) and
// says whether it did. An entry whose files are not the index's (names,
// sizes) is removed and not taken.
func (l *localMemory) take(a memimage.Artifact, dst string) bool {
	if l == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	src := l.entry(a.Digest)
	if _, err := os.Stat(src); err != nil {
		return false
	}
	if err := l.takeLocked(a, src, dst); err != nil {
		_ = os.RemoveAll(dst)
		l.log.Warn("memory image cache: entry not used, pulling", "image", a.Ref(), "err", err)
		_ = os.RemoveAll(src)
		return false
	}
	now := time.Now()
	_ = os.Chtimes(src, now, now) // recently used
	return true
}

func (l *localMemory) takeLocked(a memimage.Artifact, src, dst string) error {
	ents, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	if len(ents) != len(a.Index.Files) {
		return fmt.Errorf("%d files cached, the index has %d", len(ents), len(a.Index.Files))
	}
	for _, f := range a.Index.Files {
		info, err := os.Lstat(filepath.Join(src, f.Name))
		if err != nil {
			return err
		}
		if !info.Mode().IsRegular() || info.Size() != f.Size {
			return fmt.Errorf("cached %s: %d bytes, the index has %d", f.Name, info.Size(), f.Size)
		}
	}
	if err := os.Mkdir(dst, 0o700); err != nil {
		return err
	}
	for _, f := range a.Index.Files {
		if err := os.Link(filepath.Join(src, f.Name), filepath.Join(dst, f.Name)); err != nil {
			return err
		}
	}
	return nil
}
