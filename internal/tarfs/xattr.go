package tarfs

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/errdefs"
)

// PAXXattr is the prefix of the PAX records that hold extended attributes
// ("SCHILY.xattr.NAME"), as GNU tar and archive/tar write them.
const PAXXattr = "SCHILY.xattr."

// Xattrs returns the extended attributes of the entry name of d ("" for d
// itself), not following a symlink, all of them (overlay's own included).
// A file system without xattrs gives none.
func (d *Dir) Xattrs(name string) (map[string]string, error) {
	return d.readXattrs(name, &d.xbuf)
}

// readXattrs is Xattrs with buf as scratch space kept between calls.
func (d *Dir) readXattrs(name string, buf *[]byte) (map[string]string, error) {
	if len(*buf) < 256 {
		*buf = make([]byte, 1024)
	}
	n, err := d.listxattr(name, *buf)
	for errors.Is(err, unix.ERANGE) {
		var sz int
		if sz, err = d.listxattr(name, nil); err != nil {
			break
		}
		*buf = make([]byte, sz*2+1)
		n, err = d.listxattr(name, *buf)
	}
	if errors.Is(err, unix.ENOTSUP) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list xattrs of %q: %w", d.Path(name), err)
	}
	if n == 0 {
		return nil, nil
	}
	names := strings.Split(string(bytes.TrimRight((*buf)[:n], "\x00")), "\x00")
	out := make(map[string]string, len(names))
	for _, attr := range names {
		if attr == "" {
			continue
		}
		v, err := d.getxattrAll(name, attr, buf)
		if errors.Is(err, unix.ENODATA) {
			continue // removed since the listing
		}
		if err != nil {
			return nil, fmt.Errorf("get xattr %s of %q: %w", attr, d.Path(name), err)
		}
		out[attr] = v
	}
	return out, nil
}

func (d *Dir) getxattrAll(name, attr string, buf *[]byte) (string, error) {
	for {
		n, err := d.getxattr(name, attr, *buf)
		if errors.Is(err, unix.ERANGE) {
			sz, err := d.getxattr(name, attr, nil)
			if err != nil {
				return "", err
			}
			*buf = make([]byte, sz*2+1)
			continue
		}
		if err != nil {
			return "", err
		}
		return string((*buf)[:n]), nil
	}
}

// overlayXattrs takes overlayfs's own xattrs (trusted.overlay.* and, on a
// "userxattr" overlay, user.overlay.*) out of xs and reports whether they
// mark an opaque directory. Those that make an upper dir depend on its lower
// layers in a way a tar layer cannot express (redirect_dir, metacopy) give
// errdefs.ErrFailedPrecondition.
func overlayXattrs(xs map[string]string, full string) (opaque bool, err error) {
	for name, v := range xs {
		rest, ok := strings.CutPrefix(name, "trusted.overlay.")
		if !ok {
			if rest, ok = strings.CutPrefix(name, "user.overlay."); !ok {
				continue
			}
		}
		delete(xs, name)
		switch rest {
		case "opaque":
			// "y" is opaque; "x" (Linux 6.7+) only marks a lower-layer
			// directory holding xattr whiteouts, never written to an upper.
			opaque = opaque || v == "y"
		case "redirect", "metacopy":
			return false, fmt.Errorf("%q has xattr %s: overlay redirect_dir/metacopy upper dirs cannot be captured as a layer: %w",
				full, name, errdefs.ErrFailedPrecondition)
		}
	}
	return opaque, nil
}

// listxattr and getxattr read the xattrs of the entry name without
// following it: with listxattrat/getxattrat (Linux 6.13) on d's fd, or else
// with the l*xattr calls on d's /proc/self/fd link (the directory is
// reached through its own fd; the l-variants do not follow name). "" is d
// itself.
func (d *Dir) listxattr(name string, buf []byte) (int, error) {
	switch {
	case name == "":
		return unix.Flistxattr(d.fd, buf)
	case noXattrat.Load():
		return unix.Llistxattr(d.proc+name, buf)
	}
	np, err := unix.BytePtrFromString(name)
	if err != nil {
		return 0, err
	}
	var p unsafe.Pointer
	if len(buf) > 0 {
		p = unsafe.Pointer(&buf[0])
	}
	n, _, errno := unix.Syscall6(sysListxattrat, uintptr(d.fd), uintptr(unsafe.Pointer(np)), unix.AT_SYMLINK_NOFOLLOW,
		uintptr(p), uintptr(len(buf)), 0)
	runtime.KeepAlive(buf)
	if errno == unix.ENOSYS {
		noXattrat.Store(true)
		return unix.Llistxattr(d.proc+name, buf)
	}
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// xattrArgs is the kernel's struct xattr_args.
type xattrArgs struct {
	value uint64
	size  uint32
	flags uint32
}

func (d *Dir) getxattr(name, attr string, buf []byte) (int, error) {
	switch {
	case name == "":
		return unix.Fgetxattr(d.fd, attr, buf)
	case noXattrat.Load():
		return unix.Lgetxattr(d.proc+name, attr, buf)
	}
	np, err := unix.BytePtrFromString(name)
	if err != nil {
		return 0, err
	}
	an, err := unix.BytePtrFromString(attr)
	if err != nil {
		return 0, err
	}
	args := xattrArgs{size: uint32(len(buf))}
	if len(buf) > 0 {
		args.value = uint64(uintptr(unsafe.Pointer(&buf[0])))
	}
	n, _, errno := unix.Syscall6(sysGetxattrat, uintptr(d.fd), uintptr(unsafe.Pointer(np)), unix.AT_SYMLINK_NOFOLLOW,
		uintptr(unsafe.Pointer(an)), uintptr(unsafe.Pointer(&args)), unsafe.Sizeof(args))
	runtime.KeepAlive(buf)
	if errno == unix.ENOSYS {
		noXattrat.Store(true)
		return unix.Lgetxattr(d.proc+name, attr, buf)
	}
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// The *xattrat system calls (the same numbers on every architecture).
const (
	sysGetxattrat  = 464
	sysListxattrat = 465
)

// noXattrat is set when the kernel lacks the *xattrat calls (before 6.13).
var noXattrat atomic.Bool

// OverlayXattrs reads the xattrs of the entry name of d, an overlay upper
// dir's, as a walk with Options.Overlay does: whether it is an opaque
// directory, or errdefs.ErrFailedPrecondition if it uses redirect_dir or
// metacopy.
func (d *Dir) OverlayXattrs(name string) (opaque bool, err error) {
	xs, err := d.readXattrs(name, &d.xbuf)
	if err != nil || len(xs) == 0 {
		return false, err
	}
	return overlayXattrs(xs, d.Path(name))
}
