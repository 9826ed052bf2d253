// Package lazyfs serves a memory image stored in the registry
// (registry/memimage) as an image directory an engine restores from before
// the image is local: its files are a read-only FUSE file system whose
// reads fetch the chunks they touch from the registry (each checked
// against its digest) while the rest is fetched in the background.
//
// Terms:
//   - the mount: a FUSE file system at DIR/mnt holding the artifact's files;
//   - the image directory: DIR/image, symlinks to the mount's files, what
//     the engine is given (runsc opens checkpoint.img, pages_meta.img and
//     pages.img there, and keeps the descriptors);
//   - the local copy: DIR/cache, a sparse file per artifact file holding
//     the chunks fetched so far; a chunk is fetched once, whether a read or
//     the background fetch asks first;
//   - detach: the mount leaves the mount table (a lazy unmount) while the
//     descriptors the engine opened keep reading through it; the server
//     ends when the last of them is closed.
//
// What runsc does with the files (gVisor's source at the pinned version;
// docs/notes/running-state.md, "Lazy restore"): the kernel state
// (checkpoint.img) and page metadata are read in order before anything
// runs; pages.img is read by the sentry's asynchronous page loader, with
// parallel preads, in file order except for ranges a task faults on,
// which go first. With `runsc restore --background` the sandbox runs as
// soon as the metadata is loaded.
package lazyfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/internal/mountinfo"
	"github.com/envd-dev/envd/registry/memimage"
)

// FSName is the file system's name in the mount table ("fuse." + FSName
// is its type): what CleanMounts looks for.
const FSName = "envd-memimage"

// prefetchers is how many chunks the background fetch asks for at once:
// the memimage Store's default concurrency, which the registry's per-blob
// cost was measured with.
const prefetchers = 4

// Stats are a mount's counters.
type Stats struct {
	Chunks       int   // chunks of the image (holes not counted)
	Bytes        int64 // their bytes
	Fetched      int   // chunks fetched so far
	FetchedBytes int64
	// FirstFetched is how many chunks were fetched when MarkAnswered was
	// called (-1 before): what was local when the restored program first
	// answered.
	FirstFetched      int
	FirstFetchedBytes int64
}

// Mount is a mounted memory image. Its methods are safe for concurrent
// use.
type Mount struct {
	dir    string
	image  string
	mnt    string
	server *fuse.Server
	files  []*file            // in the index's order
	bySize []*file            // smallest first
	cancel context.CancelFunc // stops the background fetch

	errMu  sync.Mutex
	err    error         // the first fetch error
	failed chan struct{} // closed with err set

	fetched      atomic.Int64
	fetchedBytes atomic.Int64
	chunks       int
	bytes        int64
	firstMu      sync.Mutex
	first        [2]int64 // FirstFetched, FirstFetchedBytes; -1 before

	prefetched chan struct{} // closed when the background fetch ends
	served     chan struct{} // closed when the FUSE server has ended
	closeOnce  sync.Once
}

// Open mounts artifact a of st under dir (which must exist and be empty)
// and starts fetching its chunks in the background, the smallest files
// first (the engine reads them whole before anything runs). ctx bounds
// the fetches: canceling it fails the reads not yet served.
//
// The image directory is Image(). Call Detach once the engine has opened
// the files, or Close on every other path: both leave no mount behind.
func Open(ctx context.Context, st *memimage.Store, a memimage.Artifact, dir string) (_ *Mount, retErr error) {
	what := fmt.Sprintf("lazy memory image %s in %s", a.Ref(), dir)
	m := &Mount{
		dir: dir, image: filepath.Join(dir, "image"), mnt: filepath.Join(dir, "mnt"),
		first: [2]int64{-1, -1}, prefetched: make(chan struct{}), served: make(chan struct{}),
		failed: make(chan struct{}),
	}
	for _, d := range []string{m.mnt, m.image, filepath.Join(dir, "cache")} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
	}
	fctx, cancel := context.WithCancel(ctx)
	m.cancel = cancel
	defer func() {
		if retErr != nil {
			cancel()
			for _, f := range m.files {
				f.local.Close()
			}
		}
	}()
	for _, fi := range a.Index.Files {
		rd, err := st.Open(fctx, a, fi.Name)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		local, err := os.OpenFile(filepath.Join(dir, "cache", fi.Name), os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		f := &file{m: m, name: fi.Name, mode: fi.Mode & 0o777, size: rd.Size(), rd: rd, local: local,
			ext: rd.Extents(), wait: map[int]chan struct{}{}}
		f.have = make([]bool, len(f.ext))
		f.whole = make(chan struct{})
		m.files = append(m.files, f)
		if err := local.Truncate(f.size); err != nil { // holes read as zeros
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		for _, e := range f.ext {
			if !e.Hole {
				m.chunks++
				m.bytes += e.Len
				f.pending++
			}
		}
		if f.pending == 0 {
			close(f.whole)
		}
	}
	// Smaller files first: the engine reads them whole before anything
	// runs, and a larger file's reads wait for them (bySize).
	m.bySize = append([]*file(nil), m.files...)
	sort.SliceStable(m.bySize, func(i, j int) bool { return m.bySize[i].size < m.bySize[j].size })
	for i, f := range m.bySize {
		f.before = m.bySize[:i]
	}
	long := time.Hour // the files never change
	root := &root{files: m.files}
	server, err := fs.Mount(m.mnt, root, &fs.Options{
		AttrTimeout: &long, EntryTimeout: &long,
		MountOptions: fuse.MountOptions{
			// runsc's sandbox reads through descriptors that runsc
			// restore (root) opened; allow_other keeps its uid out of it.
			AllowOther: true, FsName: FSName, Name: FSName, DirectMount: true,
			MaxReadAhead: 1 << 20,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("%s: mount: %w", what, err)
	}
	m.server = server
	go func() {
		server.Wait()
		for _, f := range m.files {
			f.local.Close()
		}
		close(m.served)
	}()
	for _, f := range m.files {
		if err := os.Symlink(filepath.Join(m.mnt, f.name), filepath.Join(m.image, f.name)); err != nil {
			m.Close()
			return nil, fmt.Errorf("%s: %w", what, err)
		}
	}
	go m.prefetch(fctx)
	return m, nil
}

// Image is the image directory to restore from.
func (m *Mount) Image() string { return m.image }

// Err is the first error a chunk fetch met (the registry down, a digest
// mismatch: errdefs kinds from memimage), or nil. A read that met it
// failed with EIO: the engine's own error says less than this one.
func (m *Mount) Err() error {
	m.errMu.Lock()
	defer m.errMu.Unlock()
	return m.err
}

func (m *Mount) fail(err error) {
	m.errMu.Lock()
	defer m.errMu.Unlock()
	if m.err == nil {
		m.err = err
		close(m.failed)
	}
}

// Stats returns the mount's counters now.
func (m *Mount) Stats() Stats {
	m.firstMu.Lock()
	first := m.first
	m.firstMu.Unlock()
	return Stats{Chunks: m.chunks, Bytes: m.bytes, Fetched: int(m.fetched.Load()), FetchedBytes: m.fetchedBytes.Load(),
		FirstFetched: int(first[0]), FirstFetchedBytes: first[1]}
}

// MarkAnswered records the counters at the moment the restored program
// first answered (once; later calls do nothing).
func (m *Mount) MarkAnswered() {
	m.firstMu.Lock()
	defer m.firstMu.Unlock()
	if m.first[0] < 0 {
		m.first = [2]int64{m.fetched.Load(), m.fetchedBytes.Load()}
	}
}

// Prefetched is closed when the background fetch has ended: every chunk
// local, or a fetch failed (Err), or the mount closed.
func (m *Mount) Prefetched() <-chan struct{} { return m.prefetched }

// Served is closed when the FUSE server has ended (after Close, or after
// Detach once the engine closed its descriptors).
func (m *Mount) Served() <-chan struct{} { return m.served }

// Detach takes the mount out of the mount table; the descriptors opened
// through it keep reading (the background fetch goes on). The server ends
// when the last of them is closed.
func (m *Mount) Detach() error {
	if err := unix.Unmount(m.mnt, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("detach %s: %w", m.mnt, err)
	}
	return nil
}

// Close stops the background fetch and takes the mount out of the mount
// table. Reads through descriptors still open fail from then on only if
// they need a chunk not yet local.
func (m *Mount) Close() error {
	var err error
	m.closeOnce.Do(func() {
		m.cancel()
		err = m.Detach()
	})
	return err
}

// prefetch fetches every chunk not yet local, files in size order.
func (m *Mount) prefetch(ctx context.Context) {
	defer close(m.prefetched)
	type job struct {
		f *file
		i int
	}
	files := m.bySize
	jobs := make(chan job)
	var wg sync.WaitGroup
	for range prefetchers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				if err := j.f.ensure(j.i); err != nil {
					return
				}
			}
		}()
	}
	func() {
		defer close(jobs)
		for _, f := range files {
			for i, e := range f.ext {
				if e.Hole {
					continue
				}
				select {
				case jobs <- job{f, i}:
				case <-ctx.Done():
					return
				}
				if m.Err() != nil {
					return
				}
			}
		}
	}()
	wg.Wait()
}

// CleanMounts takes out of the mount table every mount of this package
// at or below dir: what a process killed while it served them left
// (their server is gone; every access to them fails with ENOTCONN, so the
// directory cannot be removed until they are unmounted). It runs at a
// node's start, before its work dir's scratch is removed.
func CleanMounts(dir string) error {
	infos, err := mountinfo.Read("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	var errs []error
	for i := len(infos) - 1; i >= 0; i-- {
		in := infos[i]
		if in.FSType != "fuse."+FSName || (in.MountPoint != dir && !hasPrefixDir(in.MountPoint, dir)) {
			continue
		}
		if err := unix.Unmount(in.MountPoint, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", in.MountPoint, err))
		}
	}
	return errors.Join(errs...)
}

func hasPrefixDir(p, dir string) bool {
	return len(p) > len(dir) && p[:len(dir)] == dir && p[len(dir)] == '/'
}

// root is the mount's only directory.
type root struct {
	fs.Inode
	files []*file
}

var _ fs.NodeOnAdder = (*root)(nil)

func (r *root) OnAdd(ctx context.Context) {
	for _, f := range r.files {
		ch := r.NewPersistentInode(ctx, f, fs.StableAttr{Mode: syscall.S_IFREG})
		r.AddChild(f.name, ch, false)
	}
}

// file is one file of the image.
type file struct {
	fs.Inode
	m     *Mount
	name  string
	mode  uint32
	size  int64
	rd    *memimage.Reader
	ext   []memimage.Extent
	local *os.File

	// before are the files smaller than this one: a read of this one
	// waits until they are local. runsc's page loader starts reading
	// pages.img as soon as the restore begins, before the kernel state
	// (checkpoint.img) is loaded; on a link that the registry's chunks
	// share, the kernel state would otherwise wait behind the pages, and
	// nothing runs before it is loaded.
	before []*file

	mu      sync.Mutex
	have    []bool
	wait    map[int]chan struct{} // extents being fetched
	pending int                   // chunks not yet local
	whole   chan struct{}         // closed when every chunk is local
}

var (
	_ fs.NodeGetattrer = (*file)(nil)
	_ fs.NodeOpener    = (*file)(nil)
	_ fs.NodeReader    = (*file)(nil)
)

func (f *file) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = syscall.S_IFREG | f.mode
	out.Size = uint64(f.size)
	out.Blocks = (uint64(f.size) + 511) / 512
	out.Nlink = 1
	return 0
}

func (f *file) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if flags&(syscall.O_WRONLY|syscall.O_RDWR|syscall.O_TRUNC) != 0 {
		return nil, 0, syscall.EROFS
	}
	// The kernel's page cache may keep what was read: the file never
	// changes.
	return nil, fuse.FOPEN_KEEP_CACHE, 0
}

func (f *file) Read(ctx context.Context, fh fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if off >= f.size {
		return fuse.ReadResultData(nil), 0
	}
	for _, g := range f.before {
		select {
		case <-g.whole:
		case <-f.m.failed:
			return nil, syscall.EIO
		case <-ctx.Done():
			return nil, syscall.EINTR
		}
	}
	end := min(off+int64(len(dest)), f.size)
	i := sort.Search(len(f.ext), func(i int) bool { return f.ext[i].Off+f.ext[i].Len > off })
	for ; i < len(f.ext) && f.ext[i].Off < end; i++ {
		if f.ext[i].Hole {
			continue
		}
		if err := f.ensure(i); err != nil {
			return nil, syscall.EIO
		}
	}
	n, err := f.local.ReadAt(dest[:end-off], off)
	if err != nil && n < int(end-off) {
		return nil, syscall.EIO
	}
	return fuse.ReadResultData(dest[:n]), 0
}

// ensure makes extent i local: fetched once, whoever asks first; the
// others wait for that fetch.
func (f *file) ensure(i int) error {
	for {
		f.mu.Lock()
		if f.have[i] {
			f.mu.Unlock()
			return nil
		}
		if ch, ok := f.wait[i]; ok {
			f.mu.Unlock()
			<-ch
			f.mu.Lock()
			ok := f.have[i]
			f.mu.Unlock()
			if ok {
				return nil
			}
			if err := f.m.Err(); err != nil {
				return err
			}
			continue
		}
		ch := make(chan struct{})
		f.wait[i] = ch
		f.mu.Unlock()

		err := f.fetch(i)
		f.mu.Lock()
		delete(f.wait, i)
		if err == nil {
			f.have[i] = true
			if f.pending--; f.pending == 0 {
				close(f.whole)
			}
		}
		f.mu.Unlock()
		close(ch)
		if err != nil {
			f.m.fail(err)
		}
		return err
	}
}

func (f *file) fetch(i int) error {
	e := f.ext[i]
	buf := make([]byte, e.Len)
	if _, err := f.rd.ReadAt(buf, e.Off); err != nil {
		return fmt.Errorf("memory image file %s at %d: %w", f.name, e.Off, err)
	}
	if _, err := f.local.WriteAt(buf, e.Off); err != nil {
		return fmt.Errorf("local copy of memory image file %s: %w", f.name, err)
	}
	f.m.fetched.Add(1)
	f.m.fetchedBytes.Add(e.Len)
	return nil
}
