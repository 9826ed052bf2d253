package files

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
)

// MaxWatches bounds the directories one recursive watch follows; deeper
// trees are followed up to it.
const MaxWatches = 8192

const watchMask = unix.IN_CREATE | unix.IN_MODIFY | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
	unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR | unix.IN_EXCL_UNLINK

// Inotify is one inotify instance that every watch of a node shares. envd
// runs as root, so all tenants' watches draw on one user's inotify limits:
// fs.inotify.max_user_instances (128 by default, which an instance per
// watch let a few tenants use up) and fs.inotify.max_user_watches. An
// Inotify also counts the directories watched, per key (a tenant) and in
// all, against its limits: past them a watch is refused with
// errdefs.ErrResourceExhausted, and a recursive watch follows no more
// subdirectories.
//
// The kernel gives one watch descriptor per directory (inode) and
// instance: watches of one directory by several requests share it, and it
// is removed with the last of them.
type Inotify struct {
	f        *os.File
	fd       int
	perKey   int
	total    int
	mu       sync.Mutex
	wds      map[int]map[*watcher]string // watch descriptor -> watchers, and the path each knows it by
	keys     map[string]int              // directories watched per key
	watching int                         // directories watched in all
	closed   bool
	done     chan struct{}
}

// Default limits of NewInotify.
const (
	DefaultWatchesPerKey = 4 * MaxWatches
	// The node's limit is this share of fs.inotify.max_user_watches,
	// leaving the rest to the node's other root processes.
	nodeWatchShare = 0.75
)

// NewInotify starts a shared inotify instance. perKey and total bound the
// directories watched per key and in all; 0 takes DefaultWatchesPerKey
// and three quarters of fs.inotify.max_user_watches.
func NewInotify(perKey, total int) (*Inotify, error) {
	if perKey <= 0 {
		perKey = DefaultWatchesPerKey
	}
	if total <= 0 {
		total = 8192 // the kernel's old default, when the setting cannot be read
		if b, err := os.ReadFile("/proc/sys/fs/inotify/max_user_watches"); err == nil {
			if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n > 0 {
				total = max(1, int(float64(n)*nodeWatchShare))
			}
		}
	}
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		if errors.Is(err, unix.EMFILE) {
			return nil, fmt.Errorf("inotify: the node's fs.inotify.max_user_instances is used up: %w", errdefs.ErrResourceExhausted)
		}
		return nil, fmt.Errorf("inotify: %w", err)
	}
	in := &Inotify{f: os.NewFile(uintptr(fd), "inotify"), fd: fd, perKey: perKey, total: total,
		wds: map[int]map[*watcher]string{}, keys: map[string]int{}, done: make(chan struct{})}
	go in.read()
	return in, nil
}

// Close ends every watch and releases the instance.
func (in *Inotify) Close() error {
	in.mu.Lock()
	in.closed = true
	in.mu.Unlock()
	err := in.f.Close()
	<-in.done
	return err
}

// Watching is how many directories key's watches follow now.
func (in *Inotify) Watching(key string) int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.keys[key]
}

// rawEvent is one inotify event.
type rawEvent struct {
	wd     int
	mask   uint32
	cookie uint32
	name   string
}

// read hands each read's events to the watchers of their descriptors, in
// the kernel's order; a watcher too slow to take them gets an overflow.
func (in *Inotify) read() {
	defer close(in.done)
	buf := make([]byte, 64<<10)
	for {
		n, err := in.f.Read(buf)
		if err != nil {
			in.mu.Lock()
			for _, ws := range in.wds {
				for w := range ws {
					w.fail(fmt.Errorf("read inotify events: %w", err))
				}
			}
			in.mu.Unlock()
			return
		}
		batches := map[*watcher][]rawEvent{}
		in.mu.Lock()
		for b := buf[:n]; len(b) >= unix.SizeofInotifyEvent; {
			ev := rawEvent{
				wd:     int(int32(binary.NativeEndian.Uint32(b[0:]))),
				mask:   binary.NativeEndian.Uint32(b[4:]),
				cookie: binary.NativeEndian.Uint32(b[8:]),
			}
			nameLen := int(binary.NativeEndian.Uint32(b[12:]))
			if unix.SizeofInotifyEvent+nameLen > len(b) {
				break
			}
			ev.name = string(trimNUL(b[unix.SizeofInotifyEvent : unix.SizeofInotifyEvent+nameLen]))
			b = b[unix.SizeofInotifyEvent+nameLen:]
			if ev.mask&unix.IN_Q_OVERFLOW != 0 {
				for _, ws := range in.wds {
					for w := range ws {
						batches[w] = append(batches[w], ev)
					}
				}
				continue
			}
			ws := in.wds[ev.wd]
			for w, p := range ws {
				ev := ev
				ev.name = path.Join(p, ev.name) // the path as this watcher knows it
				batches[w] = append(batches[w], ev)
			}
			if ev.mask&unix.IN_IGNORED != 0 {
				// The kernel dropped the watch (its directory is gone).
				for w := range ws {
					in.uncount(w)
				}
				delete(in.wds, ev.wd)
			}
		}
		for w, evs := range batches {
			w.deliver(evs)
		}
		in.mu.Unlock()
	}
}

// add watches the directory fd holds for w, known to it as p; on a thread
// of the identity (the kernel checks the read permission). ok is false
// when a limit refused it.
func (in *Inotify) add(w *watcher, fd int, p string) (wd int, err error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		return -1, fmt.Errorf("inotify: closed: %w", errdefs.ErrUnavailable)
	}
	if in.keys[w.key] >= in.perKey {
		return -1, watchLimit(fmt.Sprintf("tenant %q already watches its limit of %d directories on this node", w.key, in.perKey), in.perKey)
	}
	if in.watching >= in.total {
		return -1, watchLimit(fmt.Sprintf("this node already watches its limit of %d directories (all tenants together)", in.total), in.total)
	}
	wd, err = unix.InotifyAddWatch(in.fd, procPath(fd), watchMask)
	if err != nil {
		if errors.Is(err, unix.ENOSPC) {
			return -1, watchLimit("the node's fs.inotify.max_user_watches is used up", in.total)
		}
		return -1, pathError(p, err)
	}
	ws := in.wds[wd]
	if ws == nil {
		ws = map[*watcher]string{}
		in.wds[wd] = ws
	}
	if _, ok := ws[w]; !ok {
		ws[w] = p
		w.count++
		in.keys[w.key]++
		in.watching++
	}
	return wd, nil
}

// WatchLimitError is a watch refused by a limit of watched directories
// (errdefs.ErrResourceExhausted).
type WatchLimitError struct {
	msg   string
	limit int
}

func watchLimit(msg string, limit int) error { return &WatchLimitError{msg: msg, limit: limit} }

func (e *WatchLimitError) Error() string {
	return fmt.Sprintf("file watch: %s: %v", e.msg, errdefs.ErrResourceExhausted)
}

func (e *WatchLimitError) Unwrap() error { return errdefs.ErrResourceExhausted }

// RetryAfter is the wait suggested to the client: watches end when their
// clients go.
func (e *WatchLimitError) RetryAfter() time.Duration { return 5 * time.Second }

// Details are the error body's numbers.
func (e *WatchLimitError) Details() map[string]any {
	return map[string]any{"kind": "watches", "limit": e.limit, "retry_after_seconds": 5}
}

// remove drops w's watch of wd; the kernel's watch goes with its last
// watcher. Called with in.mu held.
func (in *Inotify) remove(w *watcher, wd int) {
	ws := in.wds[wd]
	if _, ok := ws[w]; !ok {
		return
	}
	delete(ws, w)
	in.uncount(w)
	if len(ws) == 0 {
		delete(in.wds, wd)
		_, _ = unix.InotifyRmWatch(in.fd, uint32(wd))
	}
}

func (in *Inotify) uncount(w *watcher) {
	w.count--
	if in.keys[w.key]--; in.keys[w.key] <= 0 {
		delete(in.keys, w.key)
	}
	in.watching--
}

// WatchOptions say what Watch watches.
type WatchOptions struct {
	Path      string // a directory
	Recursive bool   // its whole subtree, directories made later included
	// Key is whose limit of watched directories the watch counts against
	// (a tenant).
	Key string
}

// Watch sends emit the changes below the directory opts.Path (recursive:
// its whole subtree), in the order the kernel saw them: create, modify
// (successive writes to one file coalesced), delete, and move (a rename
// inside the watched tree, with its old path; one out of it is a delete,
// one into it a create); overflow when events were lost. It watches
// through the shared instance in, as the identity (a directory it may not
// read is not watched). It returns when ctx ends (nil), when the directory
// itself is removed or moved (nil), or emit fails (its error). A watch
// the limits of in refuse is errdefs.ErrResourceExhausted.
func (r *Root) Watch(ctx context.Context, in *Inotify, opts WatchOptions, emit func(types.FileEvent) error) error {
	rel, err := Clean(opts.Path)
	if err != nil {
		return err
	}
	if in == nil {
		return fmt.Errorf("file watch: no inotify instance: %w", errdefs.ErrUnavailable)
	}
	w := &watcher{r: r, in: in, key: opts.Key, recursive: opts.Recursive, ch: make(chan []rawEvent, 64), errc: make(chan error, 1)}
	defer w.close()
	var rootWD int
	if err := r.as(func() (err error) { rootWD, err = w.add(rel, true); return err }); err != nil {
		return err
	}
	var last types.FileEvent
	for {
		var evs []rawEvent
		select {
		case <-ctx.Done():
			return nil
		case err := <-w.errc:
			if ctx.Err() != nil {
				return nil
			}
			return err
		case evs = <-w.ch:
		}
		if w.takeOverflow() {
			if err := emit(types.FileEvent{Type: types.FileEventOverflow, Time: time.Now().UTC()}); err != nil {
				return err
			}
		}
		events, done := w.parse(evs, rootWD)
		for _, ev := range events {
			if ev.Type == types.FileEventModify && last.Type == types.FileEventModify && last.Path == ev.Path {
				continue
			}
			if err := emit(ev); err != nil {
				return err
			}
			last = ev
		}
		if done {
			return nil
		}
	}
}

// watcher is one Watch's share of the instance.
type watcher struct {
	r         *Root
	in        *Inotify
	key       string
	recursive bool
	count     int // directories watched (in.mu)
	ch        chan []rawEvent
	errc      chan error
	overflow  bool // a batch was dropped (in.mu)
}

// deliver queues a batch of events; called with in.mu held.
func (w *watcher) deliver(evs []rawEvent) {
	select {
	case w.ch <- evs:
	default:
		w.overflow = true
	}
}

func (w *watcher) fail(err error) {
	select {
	case w.errc <- err:
	default:
	}
}

func (w *watcher) takeOverflow() bool {
	w.in.mu.Lock()
	defer w.in.mu.Unlock()
	o := w.overflow
	w.overflow = false
	return o
}

// close drops every watch of w.
func (w *watcher) close() {
	w.in.mu.Lock()
	defer w.in.mu.Unlock()
	for wd, ws := range w.in.wds {
		if _, ok := ws[w]; ok {
			w.in.remove(w, wd)
		}
	}
}

// add watches the directory rel (and, recursive, those below it), on a
// worker thread. Only the first (top) call's errors are returned.
func (w *watcher) add(rel string, top bool) (int, error) {
	fd, err := w.r.resolve(rel, unix.O_PATH|unix.O_DIRECTORY, true)
	if err != nil {
		if !top {
			return -1, nil
		}
		if errors.Is(err, unix.ENOTDIR) {
			return -1, fmt.Errorf("path %q is not a directory: only directories are watched: %w", abs(rel), errdefs.ErrFailedPrecondition)
		}
		return -1, pathError(abs(rel), err)
	}
	defer unix.Close(fd)
	return w.addFD(fd, abs(rel), top, 0)
}

func (w *watcher) addFD(fd int, p string, top bool, depth int) (int, error) {
	if err := checkFS(fd, p); err != nil {
		if top {
			return -1, err
		}
		return -1, nil
	}
	w.in.mu.Lock()
	full := w.count >= MaxWatches
	w.in.mu.Unlock()
	if full {
		return -1, nil
	}
	wd, err := w.in.add(w, fd, p)
	if err != nil {
		if top {
			return -1, err
		}
		return -1, nil
	}
	if !w.recursive || depth > 64 {
		return wd, nil
	}
	dfd, err := reopen(fd, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return wd, nil
	}
	d := osFile(dfd, p)
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	for _, name := range names {
		var st unix.Stat_t
		if unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			continue
		}
		sub, err := unix.Openat(dfd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		_, _ = w.addFD(sub, path.Join(p, name), false, depth+1)
		unix.Close(sub)
	}
	return wd, nil
}

// parse turns a batch of events (names already full paths) into file
// events; done is set when the watched directory itself went away.
func (w *watcher) parse(evs []rawEvent, rootWD int) (events []types.FileEvent, done bool) {
	now := time.Now().UTC()
	type from struct {
		cookie uint32
		path   string
		dir    bool
		at     int // index in events of its delete stand-in
	}
	var moves []from
	for _, ev := range evs {
		mask, p := ev.mask, ev.name
		isDir := mask&unix.IN_ISDIR != 0
		switch {
		case mask&unix.IN_Q_OVERFLOW != 0:
			events = append(events, types.FileEvent{Type: types.FileEventOverflow, Time: now})
			continue
		case mask&unix.IN_IGNORED != 0, mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0:
			if ev.wd == rootWD {
				done = true
			}
			continue
		}
		switch {
		case mask&unix.IN_CREATE != 0:
			events = append(events, types.FileEvent{Type: types.FileEventCreate, Path: p, Dir: isDir, Time: now})
			if isDir && w.recursive {
				w.addLater(p)
			}
		case mask&unix.IN_MODIFY != 0:
			events = append(events, types.FileEvent{Type: types.FileEventModify, Path: p, Time: now})
		case mask&unix.IN_DELETE != 0:
			events = append(events, types.FileEvent{Type: types.FileEventDelete, Path: p, Dir: isDir, Time: now})
		case mask&unix.IN_MOVED_FROM != 0:
			// A delete until its MOVED_TO turns it into a move.
			moves = append(moves, from{ev.cookie, p, isDir, len(events)})
			events = append(events, types.FileEvent{Type: types.FileEventDelete, Path: p, Dir: isDir, Time: now})
			if isDir {
				w.forget(p)
			}
		case mask&unix.IN_MOVED_TO != 0:
			out := types.FileEvent{Type: types.FileEventCreate, Path: p, Dir: isDir, Time: now}
			for i, m := range moves {
				if m.cookie == ev.cookie {
					events[m.at] = types.FileEvent{Type: types.FileEventMove, Path: p, From: m.path, Dir: isDir, Time: now}
					moves = append(moves[:i], moves[i+1:]...)
					out = types.FileEvent{}
					break
				}
			}
			if out.Type != "" {
				events = append(events, out)
			}
			if isDir && w.recursive {
				w.addLater(p)
			}
		}
	}
	return events, done
}

// addLater watches a directory that appeared (its own subtree too).
func (w *watcher) addLater(p string) {
	rel, err := Clean(p)
	if err != nil {
		return
	}
	_ = w.r.as(func() error { _, err := w.add(rel, false); return err })
}

// forget drops the watches of a directory moved away (and below it): its
// old paths are wrong now.
func (w *watcher) forget(p string) {
	w.in.mu.Lock()
	defer w.in.mu.Unlock()
	for wd, ws := range w.in.wds {
		d, ok := ws[w]
		if ok && (d == p || strings.HasPrefix(d, p+"/")) {
			w.in.remove(w, wd)
		}
	}
}

func trimNUL(b []byte) []byte {
	for i, c := range b {
		if c == 0 {
			return b[:i]
		}
	}
	return b
}
