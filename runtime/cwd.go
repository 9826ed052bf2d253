package runtime

import (
	"context"
	"fmt"
	"path"
	"strings"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/oci"

	"github.com/envd-dev/envd/api/errdefs"
)

// kernelDirs are the pseudo-filesystems no process of an instance may start
// in. A working directory there is how runc's leaked host fds were reached
// (CVE-2024-21626: cwd /proc/self/fd/N opens the host's cgroup fs); a
// fixed runc (runc.go) closes the leak, this refusal keeps the whole class
// out before runc sees the request.
var kernelDirs = []string{"/proc", "/sys", "/dev"}

// CheckCwd refuses the working directory of a process in an instance
// unless it is an absolute, clean path ("/a/b", not "a", "/a/../b", "/a/"
// or "//a") without NUL bytes, outside /proc, /sys and /dev. "" (the
// default) passes. The error wraps errdefs.ErrInvalidArgument.
func CheckCwd(dir string) error {
	if dir == "" {
		return nil
	}
	if strings.ContainsRune(dir, 0) {
		return fmt.Errorf("cwd %q: contains a NUL byte: %w", dir, errdefs.ErrInvalidArgument)
	}
	if !path.IsAbs(dir) || path.Clean(dir) != dir {
		return fmt.Errorf("cwd %q: want an absolute path without . or .. elements, repeated or trailing slashes: %w", dir, errdefs.ErrInvalidArgument)
	}
	for _, k := range kernelDirs {
		if dir == k || strings.HasPrefix(dir, k+"/") {
			return fmt.Errorf("cwd %q: a process may not start in %s or below it: %w", dir, k, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// withCheckedCwd refuses a container spec whose process would start in a
// directory CheckCwd refuses: the image's WorkingDir is the image author's
// choice, hence the tenant's.
func withCheckedCwd(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
	if s.Process == nil {
		return nil
	}
	if err := CheckCwd(s.Process.Cwd); err != nil {
		return fmt.Errorf("image working directory: %w", err)
	}
	return nil
}
