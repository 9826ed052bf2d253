package files

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path"
	"time"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/api/errdefs"
	"github.com/envd-dev/envd/api/types"
)

// MaxWatches bounds the directories one recursive watch follows; deeper
// trees are followed up to it.
const MaxWatches = 8192

const watchMask = unix.IN_CREATE | unix.IN_MODIFY | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
	unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR | unix.IN_EXCL_UNLINK

// Watch sends emit the changes below the directory p (with recursive, its
// whole subtree, directories made later included), in the order the
// kernel saw them: create, modify (successive writes to one file
// coalesced), delete, and move (a rename inside the watched tree, with
// its old path; one out of it is a delete, one into it a create). It
// watches with inotify through the root, as the identity (a directory it
// may not read is not watched). It returns when ctx ends (nil), when p
// itself is removed or moved (nil), or emit fails (its error).
func (r *Root) Watch(ctx context.Context, p string, recursive bool, emit func(types.FileEvent) error) error {
	rel, err := Clean(p)
	if err != nil {
		return err
	}
	ifd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return fmt.Errorf("inotify: %w", err)
	}
	f := os.NewFile(uintptr(ifd), "inotify")
	defer f.Close()
	w := &watcher{r: r, ifd: ifd, dirs: map[int]string{}, recursive: recursive}
	if err := r.as(func() error { return w.add(rel, true) }); err != nil {
		return err
	}
	rootWD := -1
	for wd := range w.dirs {
		if w.dirs[wd] == abs(rel) {
			rootWD = wd
		}
	}
	stop := context.AfterFunc(ctx, func() { _ = f.SetReadDeadline(time.Now()) })
	defer stop()
	buf := make([]byte, 64<<10)
	var last types.FileEvent
	for {
		n, err := f.Read(buf)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read inotify events: %w", err)
		}
		events, done := w.parse(buf[:n], rootWD)
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

type watcher struct {
	r         *Root
	ifd       int
	dirs      map[int]string // watch descriptor -> the directory's path
	recursive bool
}

// add watches the directory rel (and, recursive, those below it), on a
// worker thread. Only the first (top) call's errors are returned.
func (w *watcher) add(rel string, top bool) error {
	fd, err := w.r.resolve(rel, unix.O_PATH|unix.O_DIRECTORY, true)
	if err != nil {
		if !top {
			return nil
		}
		if errors.Is(err, unix.ENOTDIR) {
			return fmt.Errorf("path %q is not a directory: only directories are watched: %w", abs(rel), errdefs.ErrFailedPrecondition)
		}
		return pathError(abs(rel), err)
	}
	defer unix.Close(fd)
	return w.addFD(fd, abs(rel), top, 0)
}

func (w *watcher) addFD(fd int, p string, top bool, depth int) error {
	if err := checkFS(fd, p); err != nil {
		if top {
			return err
		}
		return nil
	}
	if len(w.dirs) >= MaxWatches {
		return nil
	}
	wd, err := unix.InotifyAddWatch(w.ifd, procPath(fd), watchMask)
	if err != nil {
		if top {
			return pathError(p, err)
		}
		return nil
	}
	w.dirs[wd] = p
	if !w.recursive || depth > 64 {
		return nil
	}
	dfd, err := reopen(fd, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil
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
		_ = w.addFD(sub, path.Join(p, name), false, depth+1)
		unix.Close(sub)
	}
	return nil
}

// parse turns a read's inotify events into file events; done is set when
// the watched directory itself went away.
func (w *watcher) parse(buf []byte, rootWD int) (events []types.FileEvent, done bool) {
	now := time.Now().UTC()
	type from struct {
		cookie uint32
		path   string
		dir    bool
		at     int // index in events of its delete stand-in
	}
	var moves []from
	for len(buf) >= unix.SizeofInotifyEvent {
		wd := int(int32(binary.NativeEndian.Uint32(buf[0:])))
		mask := binary.NativeEndian.Uint32(buf[4:])
		cookie := binary.NativeEndian.Uint32(buf[8:])
		nameLen := int(binary.NativeEndian.Uint32(buf[12:]))
		if unix.SizeofInotifyEvent+nameLen > len(buf) {
			break
		}
		raw := buf[unix.SizeofInotifyEvent : unix.SizeofInotifyEvent+nameLen]
		buf = buf[unix.SizeofInotifyEvent+nameLen:]
		name := string(trimNUL(raw))
		isDir := mask&unix.IN_ISDIR != 0
		if mask&unix.IN_Q_OVERFLOW != 0 {
			events = append(events, types.FileEvent{Type: types.FileEventOverflow, Time: now})
			continue
		}
		dir, ok := w.dirs[wd]
		if !ok {
			continue
		}
		if mask&unix.IN_IGNORED != 0 {
			delete(w.dirs, wd)
			if wd == rootWD {
				done = true
			}
			continue
		}
		if mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0 {
			if wd == rootWD {
				done = true
			}
			continue
		}
		p := path.Join(dir, name)
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
			moves = append(moves, from{cookie, p, isDir, len(events)})
			events = append(events, types.FileEvent{Type: types.FileEventDelete, Path: p, Dir: isDir, Time: now})
			if isDir {
				w.forget(p)
			}
		case mask&unix.IN_MOVED_TO != 0:
			ev := types.FileEvent{Type: types.FileEventCreate, Path: p, Dir: isDir, Time: now}
			for i, m := range moves {
				if m.cookie == cookie {
					events[m.at] = types.FileEvent{Type: types.FileEventMove, Path: p, From: m.path, Dir: isDir, Time: now}
					moves = append(moves[:i], moves[i+1:]...)
					ev = types.FileEvent{}
					break
				}
			}
			if ev.Type != "" {
				events = append(events, ev)
			}
			if isDir && w.recursive {
				w.addLater(p)
			}
		}
	}
	// Drop the emptied stand-ins of moves.
	out := events[:0]
	for _, ev := range events {
		if ev.Type != "" {
			out = append(out, ev)
		}
	}
	return out, done
}

// addLater watches a directory that appeared (its own subtree too).
func (w *watcher) addLater(p string) {
	rel, err := Clean(p)
	if err != nil {
		return
	}
	_ = w.r.as(func() error { return w.add(rel, false) })
}

// forget drops the watches of a directory moved away (and below it): its
// old paths are wrong now.
func (w *watcher) forget(p string) {
	for wd, d := range w.dirs {
		if d == p || (len(d) > len(p) && d[:len(p)+1] == p+"/") {
			_, _ = unix.InotifyRmWatch(w.ifd, uint32(wd))
			delete(w.dirs, wd)
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
