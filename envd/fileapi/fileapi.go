// Package fileapi is the file API's part of the core (api.FileCore):
// which root a request gets (envd/files does the rest). A Running (or
// Paused) instance on this node: its init's root, /proc/<pid>/root,
// volumes included, read-write. A Stopped instance that is not
// hibernated: for reads, its retained layer mounted read-only
// (files.OpenSnapshot) without starting it; for writes, woken first. A
// hibernated one: woken first. Every request counts as activity.
package fileapi

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/core/mount"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/files"
	"github.com/envd-dev/envd/envd/names"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/runtime"
)

// DefaultMaxFileBytes is the largest file write or archive upload when
// the node sets no limit (Config.MaxFileBytes).
const DefaultMaxFileBytes = 1 << 30

// Runtime is what the file API needs of the runtime.
type Runtime interface {
	Status(ctx context.Context, id string) (runtime.Status, error)
	Mounts(ctx context.Context, id string) ([]mount.Mount, error)
	FileView(ctx context.Context, id string) (runtime.FileView, error)
}

// Instances authorizes an instance for a principal, wakes it and records
// activity on it: the node's instance verbs (envd.Service).
type Instances interface {
	GetInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error)
	// WakeInstance returns instance id once Running, starting it when
	// it is stopped or hibernated.
	WakeInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error)
	TouchInstance(id string)
}

// Gate tells when a save's freeze of an instance ends (freeze.Gate).
type Gate interface {
	Wait(ctx context.Context, id string) error
}

// Deps is what New needs. Runtime nil: this node's runtime has no file
// access, and the file API answers ErrUnavailable.
type Deps struct {
	Node      string // this node's name
	WorkDir   string // where a stopped instance's layer is mounted read-only
	MaxBytes  int64  // one write's or archive upload's limit; 0 = DefaultMaxFileBytes
	Runtime   Runtime
	Instances Instances
	Gate      Gate
}

// Files serves the file API (api.FileCore). Close it at the end: it holds
// the node's inotify instance.
type Files struct {
	node      string
	workDir   string
	maxBytes  int64
	rt        Runtime
	instances Instances
	gate      Gate
	watches   fileWatches
}

// New makes the file API's part.
func New(d Deps) *Files {
	return &Files{node: d.Node, workDir: d.WorkDir, maxBytes: d.MaxBytes, rt: d.Runtime, instances: d.Instances, gate: d.Gate}
}

// Close closes the watches' inotify instance.
func (f *Files) Close() { f.watches.close() }

// MaxFileBytes is the node's limit on one file write or archive upload.
func (f *Files) MaxFileBytes() int64 {
	if f.maxBytes > 0 {
		return f.maxBytes
	}
	return DefaultMaxFileBytes
}

func live(st types.InstanceState) bool {
	return st == types.StateRunning || st == types.StatePaused
}

// OpenFiles opens instance id's root filesystem for the file API, acting
// as as. With write false a stopped, not hibernated instance is served
// read-only from its retained layer; otherwise a stopped or hibernated
// instance is woken first. The Root is the caller's to close.
func (f *Files) OpenFiles(ctx context.Context, p types.Principal, id string, as types.FileUser, write bool) (*files.Root, error) {
	root, _, err := f.openFiles(ctx, p, id, as, write)
	return root, err
}

func (f *Files) openFiles(ctx context.Context, p types.Principal, id string, as types.FileUser, write bool) (*files.Root, uint32, error) {
	if err := names.ValidateInstanceID(id); err != nil {
		return nil, 0, err
	}
	f.instances.TouchInstance(id)
	fr := f.rt
	if fr == nil {
		return nil, 0, fmt.Errorf("file API: this node's runtime has no file access: %w", errdefs.ErrUnavailable)
	}
	in, err := f.instances.GetInstance(ctx, p, id)
	if err != nil {
		return nil, 0, err
	}
	if !live(in.State) {
		if !write && in.State == types.StateStopped && in.HibernatedVersion == 0 && in.Node == f.node {
			root, err := f.openStopped(ctx, fr, id, as)
			return root, 0, err
		}
		if in.State == types.StateStopped {
			if in, err = f.instances.WakeInstance(ctx, p, id); err != nil {
				return nil, 0, err
			}
		}
		if !live(in.State) {
			return nil, 0, errdefs.WithDetails(fmt.Errorf("instance %q is %s: its files need it Running (or Stopped with its layer retained, to read): %w",
				id, in.State, errdefs.ErrFailedPrecondition), map[string]any{"state": in.State})
		}
	}
	if in.Node != f.node {
		return nil, 0, fmt.Errorf("instance %q runs on node %q, not on %q: %w", id, in.Node, f.node, errdefs.ErrFailedPrecondition)
	}
	st, err := fr.Status(ctx, id)
	if err != nil {
		return nil, 0, err
	}
	if st.Pid == 0 || (st.Task != "running" && st.Task != "paused") {
		return nil, 0, fmt.Errorf("instance %q has no running task: %w", id, errdefs.ErrFailedPrecondition)
	}
	if st.RootPid == 0 {
		return nil, 0, fmt.Errorf("instance %q has no running task: %w", id, errdefs.ErrFailedPrecondition)
	}
	// RootPid, not Pid: on gVisor the task's process is the sandbox,
	// whose root is not the instance's.
	root, err := files.Open("/proc/"+strconv.FormatUint(uint64(st.RootPid), 10)+"/root", files.Identity{})
	if err != nil {
		return nil, 0, fmt.Errorf("instance %q: %v: %w", id, err, errdefs.ErrFailedPrecondition)
	}
	// The pid was the instance's init when the root was opened.
	if again, err := fr.Status(ctx, id); err != nil || again.Pid != st.Pid {
		root.Close()
		return nil, 0, fmt.Errorf("instance %q stopped while its files were opened: %w", id, errdefs.ErrFailedPrecondition)
	}
	if err := f.setFileIdentity(ctx, fr, root, id, st.Labels, as); err != nil {
		root.Close()
		return nil, 0, err
	}
	if write {
		// A save reads the upper dir while it holds the task frozen: a
		// write waits for that window to end, as exec does.
		if err := f.gate.Wait(ctx, id); err != nil {
			root.Close()
			return nil, 0, fmt.Errorf("instance %q: waiting for a save's freeze to end: %w", id, err)
		}
	}
	return root, st.Pid, nil
}

// openStopped serves a stopped instance's retained layer read-only.
func (f *Files) openStopped(ctx context.Context, fr Runtime, id string, as types.FileUser) (*files.Root, error) {
	ms, err := fr.Mounts(ctx, id)
	if err != nil {
		return nil, err
	}
	view, err := fr.FileView(ctx, id)
	if err != nil {
		return nil, err
	}
	binds := make([]files.Bind, 0, len(view.Binds))
	for _, b := range view.Binds {
		binds = append(binds, files.Bind{Source: b.Source, Destination: b.Destination})
	}
	fms := make([]files.Mount, 0, len(ms))
	for _, m := range ms {
		fms = append(fms, files.Mount{Type: m.Type, Source: m.Source, Options: m.Options})
	}
	mountAt := func(m files.Mount, target string) error {
		cm := mount.Mount{Type: m.Type, Source: m.Source, Options: m.Options}
		return cm.Mount(target)
	}
	root, err := files.OpenSnapshot(fms, mountAt, binds, f.workDir, files.Identity{},
		fmt.Sprintf("instance %q is stopped: its files are read-only (start it to write)", id))
	if err != nil {
		return nil, fmt.Errorf("instance %q: %w", id, err)
	}
	st, err := fr.Status(ctx, id)
	if err == nil {
		err = f.setFileIdentity(ctx, fr, root, id, st.Labels, as)
	}
	if err != nil {
		root.Close()
		return nil, err
	}
	return root, nil
}

// setFileIdentity gives root the identity a request acts as: the image's
// user (as exec runs), or the user, uid and gid it names; ids map to the
// node's through the instance's user namespace, if any.
func (f *Files) setFileIdentity(ctx context.Context, fr Runtime, root *files.Root, id string, labels map[string]string, as types.FileUser) error {
	view, err := fr.FileView(ctx, id)
	if err != nil {
		return err
	}
	ident := files.Identity{UID: view.User.UID, GID: view.User.GID, Groups: view.User.AdditionalGids}
	if v := labels[runtime.LabelUserNS]; v != "" {
		m, err := runtime.ParseUserNSLabel(v)
		if err != nil || len(m) != 1 {
			return fmt.Errorf("instance %q: user namespace label %q: %w", id, v, errdefs.ErrFailedPrecondition)
		}
		ident.HostBase, ident.HostSize = m[0].HostID, m[0].Size
	}
	if err := root.SetIdentity(ident); err != nil {
		return err
	}
	if as.User == "" && as.UID == nil && as.GID == nil {
		return nil
	}
	if as.User != "" {
		u, err := lookupUser(ctx, root, as.User)
		if err != nil {
			return err
		}
		ident.UID, ident.GID, ident.Groups = u.uid, u.gid, u.groups
	}
	if as.UID != nil {
		if *as.UID < 0 {
			return fmt.Errorf("uid %d: %w", *as.UID, errdefs.ErrInvalidArgument)
		}
		ident.UID = uint32(*as.UID)
		if as.User == "" {
			ident.Groups = nil
		}
	}
	if as.GID != nil {
		if *as.GID < 0 {
			return fmt.Errorf("gid %d: %w", *as.GID, errdefs.ErrInvalidArgument)
		}
		ident.GID = uint32(*as.GID)
	}
	return root.SetIdentity(ident)
}

type fileUser struct {
	uid, gid uint32
	groups   []uint32
}

// lookupUser finds a user by name or number in the instance's /etc/passwd
// and its groups in /etc/group. A number without an entry is that uid,
// with gid the same.
func lookupUser(ctx context.Context, root *files.Root, name string) (fileUser, error) {
	var u fileUser
	var login string
	found := false
	num, numErr := strconv.ParseUint(name, 10, 32)
	err := scanColon(ctx, root, "/etc/passwd", func(f []string) bool {
		if len(f) < 4 {
			return true
		}
		uid, err1 := strconv.ParseUint(f[2], 10, 32)
		gid, err2 := strconv.ParseUint(f[3], 10, 32)
		if err1 != nil || err2 != nil {
			return true
		}
		if f[0] == name || (numErr == nil && uid == num) {
			u, login, found = fileUser{uid: uint32(uid), gid: uint32(gid)}, f[0], true
			return false
		}
		return true
	})
	if err != nil && !errorsIsNotFound(err) {
		return u, err
	}
	if !found {
		if numErr == nil {
			return fileUser{uid: uint32(num), gid: uint32(num)}, nil
		}
		return u, fmt.Errorf("user %q: not in the instance's /etc/passwd: %w", name, errdefs.ErrInvalidArgument)
	}
	_ = scanColon(ctx, root, "/etc/group", func(f []string) bool {
		if len(f) < 4 {
			return true
		}
		gid, err := strconv.ParseUint(f[2], 10, 32)
		if err != nil {
			return true
		}
		for m := range strings.SplitSeq(f[3], ",") {
			if m == login && uint32(gid) != u.gid {
				u.groups = append(u.groups, uint32(gid))
			}
		}
		return true
	})
	return u, nil
}

func errorsIsNotFound(err error) bool { return errdefs.Code(err) == "not_found" }

// scanColon calls fn with the fields of each line of a colon-separated
// file of the instance until fn returns false.
func scanColon(ctx context.Context, root *files.Root, p string, fn func([]string) bool) error {
	f, _, err := root.OpenFile(ctx, p)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if !fn(strings.Split(sc.Text(), ":")) {
			return nil
		}
	}
	return sc.Err()
}

// fileWatches is the node's one inotify instance, made at the first
// watch.
type fileWatches struct {
	once sync.Once
	in   *files.Inotify
	err  error
}

func (w *fileWatches) get() (*files.Inotify, error) {
	w.once.Do(func() { w.in, w.err = files.NewInotify(0, 0) })
	return w.in, w.err
}

func (w *fileWatches) close() {
	w.once.Do(func() {}) // none made after this
	if w.in != nil {
		_ = w.in.Close()
	}
}

// WatchFiles streams the changes below path of a running instance (woken
// when stopped) to emit until ctx ends or the instance stops. Its
// directories count against the tenant's and the node's limits of watched
// directories (files.Inotify).
func (f *Files) WatchFiles(ctx context.Context, p types.Principal, id string, as types.FileUser, path string, recursive bool, emit func(types.FileEvent) error) error {
	in, err := f.watches.get()
	if err != nil {
		return err
	}
	root, pid, err := f.openFiles(ctx, p, id, as, true)
	if err != nil {
		return err
	}
	defer root.Close()
	fr := f.rt
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if st, err := fr.Status(ctx, id); err == nil && (st.Pid != pid || (st.Task != "running" && st.Task != "paused")) {
				cancel()
				return
			}
		}
	}()
	return root.Watch(ctx, in, files.WatchOptions{Path: path, Recursive: recursive, Key: p.Tenant}, func(ev types.FileEvent) error {
		f.instances.TouchInstance(id)
		return emit(ev)
	})
}
