//go:build linux

package prefetch

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/internal/proc"
)

// Warming a lazy instance before it is reported Running.
//
// Terms: pid is the host pid of a container's init; its root
// (/proc/PID/root) is the container's rootfs, through which every read of a
// lazy layer fetches what is not cached yet (and caches it on the node, so
// later reads and page faults no longer need the registry). The init's
// needs are its executable, its ELF interpreter and shared libraries
// (DT_NEEDED, looked up in the usual library dirs), the files it has mapped,
// and the commands it will run (looked up in PATH, with their ELF needs).
// Paths are resolved inside the container's root (openat2
// RESOLVE_IN_ROOT): a symlink in the image cannot lead a read out of it.

// WarmOptions say what to read besides the init's executable.
type WarmOptions struct {
	// Commands the init runs later ("sleep"), looked up in PATH.
	Commands []string
	// Files are read after the init's needs, in order, best effort: a file
	// that is missing or fails to read is skipped, and reading stops at
	// MaxBytes or when ctx ends (the project's recorded first reads).
	Files []string
	// MaxBytes bounds what Files may read. 0: no bound.
	MaxBytes int64
	// MaxFileBytes skips the Files larger than this (a recording says a
	// file was read, not how much of it). 0: no bound.
	MaxFileBytes int64
	// Workers read Files in parallel. Default 4.
	Workers int
	// FilesOnly reads only Files, not the init's needs: for a read-ahead
	// that runs beside the Warm of the init from the task's start on (the
	// init's executable is only known once runc has exec'd it).
	FilesOnly bool
}

// WarmResult says what Warm read.
type WarmResult struct {
	Needed      int   // files the init needs, read
	NeededBytes int64 //
	Files       int   // of WarmOptions.Files, read whole
	FileBytes   int64
	Skipped     int // of WarmOptions.Files, missing, unreadable, over MaxBytes or MaxFileBytes, or cut by ctx
}

// libDirs are searched for DT_NEEDED libraries.
var libDirs = []string{
	"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
	"/lib64", "/usr/lib64", "/lib", "/usr/lib", "/usr/local/lib",
}

// pathDirs is the PATH commands are looked up in (runtime's default PATH).
var pathDirs = []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}

// Warm reads everything the init of process pid needs through its root,
// then opts.Files. An error reading the init's needs is returned (wrapped
// errdefs.ErrUnavailable when the read failed with EIO, as a lazy read does
// when the registry cannot be reached): the instance must not be reported
// Running. A pid that is gone gives errdefs.ErrNotFound.
func Warm(ctx context.Context, pid int, opts WarmOptions) (WarmResult, error) {
	var res WarmResult
	rootPath := fmt.Sprintf("/proc/%d/root", pid)
	root, err := unix.Open(rootPath, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return res, fmt.Errorf("warm process %d: %w", pid, errors.Join(errdefs.ErrNotFound, err))
	}
	defer unix.Close(root)

	w := &warmer{root: root, seen: map[fileID]bool{}}
	if !opts.FilesOnly {
		if err := w.warmInit(ctx, pid, opts.Commands, &res); err != nil {
			return res, err
		}
	}

	readFiles(ctx, opts, w.readFile, &res)
	return res, nil
}

// WarmLayers reads opts.Files (only) from a lazy image's layer
// directories, top first, as their overlay shows them: each file from the
// first layer that has it, none when the first layer that has something
// at its path has no regular file there (a whiteout, a directory). It reads
// through the layers' own mounts, so it can run before any container of
// the image has started; a container's reads then find the files cached.
func WarmLayers(ctx context.Context, dirs []string, opts WarmOptions) (WarmResult, error) {
	var res WarmResult
	var ws []*warmer
	for _, d := range dirs {
		root, err := unix.Open(d, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			for _, w := range ws {
				unix.Close(w.root)
			}
			return res, fmt.Errorf("warm layer %s: %w", d, errors.Join(errdefs.ErrNotFound, err))
		}
		ws = append(ws, &warmer{root: root, seen: map[fileID]bool{}})
	}
	defer func() {
		for _, w := range ws {
			unix.Close(w.root)
		}
	}()
	read := func(ctx context.Context, p string, admit func(int64) bool) (int64, bool) {
		for _, w := range ws {
			if !w.has(p) {
				continue
			}
			return w.readFile(ctx, p, admit)
		}
		return 0, false
	}
	readFiles(ctx, opts, read, &res)
	return res, nil
}

// readFiles reads opts.Files with read, opts.Workers at a time, in order,
// within opts.MaxBytes, counting them in res.
func readFiles(ctx context.Context, opts WarmOptions, read func(ctx context.Context, p string, admit func(size int64) bool) (int64, bool), res *WarmResult) {
	workers := opts.Workers
	if workers <= 0 {
		workers = 4
	}
	var (
		mu     sync.Mutex
		budget = opts.MaxBytes
		wg     sync.WaitGroup
		next   = make(chan string)
	)
	for range workers {
		wg.Go(func() {
			for p := range next {
				n, ok := read(ctx, p, func(size int64) bool {
					if opts.MaxFileBytes > 0 && size > opts.MaxFileBytes {
						return false
					}
					mu.Lock()
					defer mu.Unlock()
					if opts.MaxBytes > 0 && size > budget {
						return false
					}
					budget -= size
					return true
				})
				mu.Lock()
				if ok {
					res.Files++
					res.FileBytes += n
				} else {
					res.Skipped++
				}
				mu.Unlock()
			}
		})
	}
	sent := 0
feed:
	for _, p := range opts.Files {
		select {
		case next <- p:
			sent++
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	res.Skipped += len(opts.Files) - sent
}

// warmInit reads the init's executable, its ELF needs, the files it has
// mapped and commands with their ELF needs, counting them in res.
func (w *warmer) warmInit(ctx context.Context, pid int, commands []string, res *WarmResult) error {
	// The executable, by its /proc link: the very file the init runs,
	// wherever it is. Right after a task start the process may still be
	// runc's init, about to exec the container's init: give it a moment.
	waitExec(pid, 50, 10*time.Millisecond)
	exe, err := os.Open(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return fmt.Errorf("warm process %d: %w", pid, errors.Join(errdefs.ErrNotFound, err))
	}
	w.firstTime(exe)
	n, err := w.readELF(ctx, exe, "init executable")
	exe.Close()
	if err != nil {
		return err
	}
	res.Needed, res.NeededBytes = 1, n
	needed := mappedFiles(pid)
	for _, c := range commands {
		if p := w.lookPath(c); p != "" {
			needed = append(needed, p)
		}
	}
	for _, p := range needed {
		c, n, err := w.readNeeded(ctx, p, 0)
		if err != nil {
			return err
		}
		res.Needed += c
		res.NeededBytes += n
	}
	return nil
}

// waitExec waits, up to tries × every, while process pid is still runc's
// init: its executable a memfd copy of runc, or (runc 1.1 does this too)
// runc's own binary, run as `runc init`. Reading that as the instance's
// init would read runc (8.7 MB on this machine) and miss the real one.
func waitExec(pid, tries int, every time.Duration) {
	for range tries {
		if !isRuncInit(pid) {
			return
		}
		time.Sleep(every)
	}
}

// isRuncInit reports whether process pid is runc's init (see waitExec).
func isRuncInit(pid int) bool {
	if l, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err != nil {
		return false
	} else if strings.HasPrefix(l, "/memfd:") {
		return true
	}
	argv := proc.Args(pid)
	return len(argv) == 2 && argv[1] == "init" && strings.HasPrefix(path.Base(argv[0]), "runc")
}

type warmer struct {
	root int
	mu   sync.Mutex
	seen map[fileID]bool
}

// fileID is a file whatever the path it was reached by.
type fileID struct{ dev, ino uint64 }

// open opens the regular file p (absolute, inside the container)
// read-only without following it out of the root. Anything but a regular
// file (a device node, a FIFO) is never opened for reading: that may have
// effects of its own.
func (w *warmer) open(p string) (*os.File, error) {
	fd, err := unix.Openat2(w.root, strings.TrimPrefix(path.Clean("/"+p), "/"), &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &os.PathError{Op: "stat", Path: p, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, &os.PathError{Op: "open", Path: p, Err: unix.EINVAL}
	}
	rfd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(fd), unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p, Err: err}
	}
	return os.NewFile(uintptr(rfd), p), nil
}

// has reports whether the root holds anything at p (without following a
// last symlink out of it): a layer that does shadows the layers below.
func (w *warmer) has(p string) bool {
	fd, err := unix.Openat2(w.root, strings.TrimPrefix(path.Clean("/"+p), "/"), &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
}

// firstTime reports whether f was not read yet by this warmer.
func (w *warmer) firstTime(f *os.File) bool {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return false
	}
	id := fileID{uint64(st.Dev), st.Ino}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.seen[id] {
		return false
	}
	w.seen[id] = true
	return true
}

// readNeeded reads p and, for an ELF file, its interpreter and libraries.
// A missing file is not an error (a library the loader finds elsewhere);
// a failed read is.
func (w *warmer) readNeeded(ctx context.Context, p string, depth int) (int, int64, error) {
	if depth > 8 {
		return 0, 0, nil
	}
	f, err := w.open(p)
	if err != nil {
		return 0, 0, nil
	}
	defer f.Close()
	if !w.firstTime(f) {
		return 0, 0, nil
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return 0, 0, nil
	}
	n, err := w.readELFDeps(ctx, f, p, depth)
	return 1, n, err
}

// readELF reads f whole and the interpreter and libraries it names.
func (w *warmer) readELF(ctx context.Context, f *os.File, what string) (int64, error) {
	return w.readELFDeps(ctx, f, what, 0)
}

func (w *warmer) readELFDeps(ctx context.Context, f *os.File, what string, depth int) (int64, error) {
	n, err := readWhole(ctx, f)
	if err != nil {
		return n, fmt.Errorf("read %s: %w", what, err)
	}
	ef, err := elf.NewFile(f)
	if err != nil {
		return n, nil // a script, or data
	}
	defer ef.Close()
	var deps []string
	for _, prog := range ef.Progs {
		if prog.Type == elf.PT_INTERP {
			b, err := io.ReadAll(io.LimitReader(prog.Open(), 4096))
			if err == nil {
				deps = append(deps, string(bytes.TrimRight(b, "\x00")))
			}
		}
	}
	libs, _ := ef.ImportedLibraries()
	for _, lib := range libs {
		if strings.Contains(lib, "/") {
			deps = append(deps, lib)
			continue
		}
		for _, d := range libDirs {
			if f, err := w.open(d + "/" + lib); err == nil {
				f.Close()
				deps = append(deps, d+"/"+lib)
				break
			}
		}
	}
	for _, d := range deps {
		_, m, err := w.readNeeded(ctx, d, depth+1)
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// readFile reads p whole if admit allows its size; best effort.
func (w *warmer) readFile(ctx context.Context, p string, admit func(size int64) bool) (int64, bool) {
	if ctx.Err() != nil {
		return 0, false
	}
	f, err := w.open(p)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	if !w.firstTime(f) {
		return 0, false
	}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || !admit(fi.Size()) {
		return 0, false
	}
	n, err := readWhole(ctx, f)
	return n, err == nil
}

// lookPath finds command c in PATH inside the container; "" if not found.
func (w *warmer) lookPath(c string) string {
	if strings.Contains(c, "/") {
		return c
	}
	for _, d := range pathDirs {
		if f, err := w.open(d + "/" + c); err == nil {
			f.Close()
			return d + "/" + c
		}
	}
	return ""
}

// readWhole reads f from the start to its end, checking ctx between
// blocks. A lazy read that cannot reach the registry fails with EIO:
// wrapped with errdefs.ErrUnavailable.
func readWhole(ctx context.Context, f *os.File) (int64, error) {
	// 128 KiB, the largest read FUSE passes on in one request. With 1 MiB
	// reads the kernel sent eight requests at once for the same eStargz
	// chunk, and the stargz snapshotter decompressed and verified the
	// chunk for each of them: the 20 MB Graphviz list took 1.8-2.1 s to
	// read ahead against 0.95-1.25 s this way (docs/notes/lazy-restore.md, "Lazy up, third pass").
	buf := make([]byte, 128<<10)
	var n int64
	for {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		m, err := f.ReadAt(buf, n)
		n += int64(m)
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			if errors.Is(err, unix.EIO) {
				return n, fmt.Errorf("%w: %w", errdefs.ErrUnavailable, err)
			}
			return n, err
		}
	}
}

// mappedFiles are the files process pid has mapped, as paths inside its
// root, from /proc/PID/maps (the loader has mapped the libraries by the
// time the init runs).
func mappedFiles(pid int) []string {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/maps")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || !strings.HasPrefix(fields[5], "/") || fields[len(fields)-1] == "(deleted)" {
			continue
		}
		p := strings.Join(fields[5:], " ")
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}

// Lazy reports whether the root filesystem of process pid has a lower
// layer served by FUSE (a lazily pulled layer): only then is there
// anything to warm.
func Lazy(pid int) (bool, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/mountinfo")
	if err != nil {
		return false, fmt.Errorf("mounts of process %d: %w", pid, errors.Join(errdefs.ErrNotFound, err))
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source superoptions
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 || fields[4] != "/" {
			continue
		}
		sep := -1
		for i, fl := range fields {
			if fl == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+3 >= len(fields) {
			continue
		}
		fstype, super := fields[sep+1], fields[sep+3]
		if strings.HasPrefix(fstype, "fuse") {
			return true, nil
		}
		if fstype != "overlay" {
			return false, nil
		}
		for _, o := range strings.Split(super, ",") {
			lower, ok := strings.CutPrefix(o, "lowerdir=")
			if !ok {
				continue
			}
			for _, d := range strings.Split(lower, ":") {
				var st unix.Statfs_t
				if unix.Statfs(unescapeMount(d), &st) == nil && st.Type == unix.FUSE_SUPER_MAGIC {
					return true, nil
				}
			}
		}
		return false, nil
	}
	return false, sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// WarmTimeout is a default bound for Warm, for callers without one: past
// the lazy snapshotter's fetch timeout (20 s) a read has failed already.
const WarmTimeout = 30 * time.Second
