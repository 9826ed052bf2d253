package types

import (
	"fmt"
	"path"
	"strings"

	"github.com/envd-dev/envd/errdefs"
)

// The checks here are pure functions of a request, shared by the API (which
// refuses bad input before any work) and the core (which must refuse it
// for every other caller: SSH, the console, the Go API).

// MaxIdempotencyKey is the longest idempotency key, in bytes.
const MaxIdempotencyKey = 255

// CheckIdempotencyKey refuses a key the store cannot hold: longer than
// MaxIdempotencyKey bytes, or with control characters. "" (no key) is
// valid. The error wraps errdefs.ErrInvalidArgument.
func CheckIdempotencyKey(key string) error {
	if len(key) > MaxIdempotencyKey {
		return fmt.Errorf("idempotency key: %d bytes, longer than %d: %w", len(key), MaxIdempotencyKey, errdefs.ErrInvalidArgument)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x20 || c == 0x7f {
			return fmt.Errorf("idempotency key %q: control character at byte %d: %w", key, i, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// CheckExecRequest refuses what the OCI runtime would fail on only after
// the exec was sent to it: no command, NUL bytes (argv, environment and the
// directory are C strings), environment entries that are not KEY=VALUE,
// and a working directory CheckCwd refuses (relative, not clean, or in
// /proc, /sys or /dev). The error wraps errdefs.ErrInvalidArgument.
func CheckExecRequest(req ExecRequest) error {
	if len(req.Args) == 0 || req.Args[0] == "" {
		return fmt.Errorf("exec: args: at least the command is required: %w", errdefs.ErrInvalidArgument)
	}
	for i, a := range req.Args {
		if strings.ContainsRune(a, 0) {
			return fmt.Errorf("exec: args[%d] %q contains a NUL byte: %w", i, a, errdefs.ErrInvalidArgument)
		}
	}
	for _, e := range req.Env {
		k, _, ok := strings.Cut(e, "=")
		if !ok || k == "" || strings.ContainsRune(e, 0) {
			return fmt.Errorf("exec: env %q: want KEY=VALUE without NUL bytes: %w", e, errdefs.ErrInvalidArgument)
		}
	}
	if err := CheckCwd(req.Cwd); err != nil {
		return fmt.Errorf("exec: %w", err)
	}
	return nil
}

// kernelDirs are the pseudo-filesystems no process of an instance may start
// in. A working directory there is how runc's leaked host fds were reached
// (CVE-2024-21626: cwd /proc/self/fd/N opens the host's cgroup fs); a
// fixed runc closes the leak, this refusal keeps the whole class out before
// runc sees the request.
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
