package memimage

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"sync"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/envd-dev/envd/errdefs"
)

// Pull writes a's files into dir, which must not exist yet: they are
// written into a sibling temporary directory, synced, and renamed to dir, so
// dir is either absent or complete (what an engine restores from). Holes
// stay holes (the files are sparse); every chunk is checked against its
// digest. An existing dir is errdefs.ErrAlreadyExists.
func (s *Store) Pull(ctx context.Context, a Artifact, dir string) error {
	what := fmt.Sprintf("pull memory image %s into %s", a.Ref(), dir)
	if err := a.check(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if _, err := os.Lstat(dir); err == nil {
		return fmt.Errorf("%s: %w", what, errdefs.ErrAlreadyExists)
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%s: %w", what, err)
	}
	r, _, hc, err := s.remote(ctx, a.Repo)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "."+filepath.Base(dir)+".pull-")
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	done := false
	defer func() {
		if !done {
			_ = os.RemoveAll(tmp)
		}
	}()

	ix := &a.Index
	files := make([]*os.File, len(ix.Files))
	defer func() {
		for _, f := range files {
			if f != nil {
				f.Close()
			}
		}
	}()
	var chunks []chunkRef
	for fi, f := range ix.Files {
		fh, err := os.OpenFile(filepath.Join(tmp, f.Name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, os.FileMode(f.Mode&0o777))
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		files[fi] = fh
		if err := fh.Chmod(os.FileMode(f.Mode & 0o777)); err != nil { // whatever the umask
			return fmt.Errorf("%s: %w", what, err)
		}
		// The holes: a file of its full size reads zeros where nothing
		// is written.
		if err := fh.Truncate(f.Size); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		offs := ix.offsets(&ix.Files[fi])
		for i, d := range f.Chunks {
			if d != "" {
				chunks = append(chunks, chunkRef{file: fi, i: i, off: offs[i], n: offs[i+1] - offs[i]})
			}
		}
	}
	err = s.each(ctx, len(chunks), func(ctx context.Context, k int) error {
		c := chunks[k]
		d := ix.Files[c.file].Chunks[c.i]
		buf, err := fetchBlob(ctx, hc, r, d, c.n)
		if err != nil {
			return err
		}
		_, err = files[c.file].WriteAt(buf, c.off)
		return err
	})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	for _, f := range files {
		if err := f.Sync(); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	if err := syncDir(tmp); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	done = true
	return syncDir(filepath.Dir(dir))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Reader reads one file of an artifact lazily: each ReadAt finds the
// extents it touches (a binary search of their offsets) and fetches the
// chunks among them that are not in its cache, one GET per chunk, checked
// against the chunk's digest; holes read as zeros without a request.
// Concurrent ReadAts of one chunk share one fetch. It is safe for
// concurrent use; the context given to Open bounds every fetch.
type Reader struct {
	ctx  context.Context
	r    name.Repository
	hc   *http.Client
	f    *IndexFile
	offs []int64 // where each extent starts, and the file's size
	max  int
	mu   sync.Mutex
	lru  *list.List // of *cached, most recent first
	byI  map[int]*list.Element
	wait map[int]*fetch

	fetches int64 // chunks fetched, for tests and the bench
}

type cached struct {
	i    int
	data []byte
}

type fetch struct {
	done chan struct{}
	data []byte
	err  error
}

// Open returns a lazy Reader of a's file named name. An unknown name is
// errdefs.ErrNotFound.
func (s *Store) Open(ctx context.Context, a Artifact, fileName string) (*Reader, error) {
	what := fmt.Sprintf("memory image %s file %q", a.Ref(), fileName)
	if err := a.check(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	var f *IndexFile
	for i := range a.Index.Files {
		if a.Index.Files[i].Name == fileName {
			f = &a.Index.Files[i]
		}
	}
	if f == nil {
		return nil, fmt.Errorf("%s: %w", what, errdefs.ErrNotFound)
	}
	r, _, hc, err := s.remote(ctx, a.Repo)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return &Reader{
		ctx: ctx, r: r, hc: hc, f: f, offs: a.Index.offsets(f), max: s.o.cache,
		lru: list.New(), byI: map[int]*list.Element{}, wait: map[int]*fetch{},
	}, nil
}

// Size is the file's size.
func (rd *Reader) Size() int64 { return rd.f.Size }

// Extent is one extent of a file: Len bytes from Off, one chunk or a hole
// (zeros, nothing stored).
type Extent struct {
	Off, Len int64
	Hole     bool
}

// Extents lists the file's extents in order; they tile it. A caller that
// keeps what it read (a lazy file's local copy) reads whole extents, so
// each chunk is fetched once.
func (rd *Reader) Extents() []Extent {
	out := make([]Extent, len(rd.f.Chunks))
	for i, d := range rd.f.Chunks {
		out[i] = Extent{Off: rd.offs[i], Len: rd.offs[i+1] - rd.offs[i], Hole: d == ""}
	}
	return out
}

// Fetches is how many chunks the Reader has fetched from the registry.
func (rd *Reader) Fetches() int64 {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	return rd.fetches
}

// ReadAt reads len(p) bytes from off, as io.ReaderAt says: fewer only at
// the end of the file (with io.EOF) or on an error.
func (rd *Reader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("read at %d: %w", off, errdefs.ErrInvalidArgument)
	}
	n := 0
	for n < len(p) {
		pos := off + int64(n)
		if pos >= rd.f.Size {
			return n, io.EOF
		}
		// The extent holding pos: the last one starting at or before it.
		i := sort.Search(len(rd.f.Chunks), func(i int) bool { return rd.offs[i+1] > pos })
		in := pos - rd.offs[i]
		want := min(int64(len(p)-n), rd.offs[i+1]-pos)
		if rd.f.Chunks[i] == "" {
			clear(p[n : n+int(want)])
		} else {
			data, err := rd.chunk(i)
			if err != nil {
				return n, err
			}
			copy(p[n:n+int(want)], data[in:in+want])
		}
		n += int(want)
	}
	return n, nil
}

// chunk returns chunk i's bytes, from the cache or the registry.
func (rd *Reader) chunk(i int) ([]byte, error) {
	rd.mu.Lock()
	if e, ok := rd.byI[i]; ok {
		rd.lru.MoveToFront(e)
		rd.mu.Unlock()
		return e.Value.(*cached).data, nil
	}
	if f, ok := rd.wait[i]; ok {
		rd.mu.Unlock()
		<-f.done
		return f.data, f.err
	}
	f := &fetch{done: make(chan struct{})}
	rd.wait[i] = f
	rd.fetches++
	rd.mu.Unlock()

	f.data, f.err = fetchBlob(rd.ctx, rd.hc, rd.r, rd.f.Chunks[i], rd.offs[i+1]-rd.offs[i])
	rd.mu.Lock()
	delete(rd.wait, i)
	if f.err == nil {
		rd.byI[i] = rd.lru.PushFront(&cached{i: i, data: f.data})
		for rd.lru.Len() > rd.max {
			old := rd.lru.Remove(rd.lru.Back()).(*cached)
			delete(rd.byI, old.i)
		}
	}
	rd.mu.Unlock()
	close(f.done)
	return f.data, f.err
}
