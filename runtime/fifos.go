package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/runtime/agent"
)

// maxFIFOListing bounds what `envd-agent fifos` may print (agent.MaxFIFOs
// paths of up to PATH_MAX bytes would be more; such a list is cut).
const maxFIFOListing = 256 << 10

// SandboxFIFOs lists the FIFOs that exist only inside running gVisor
// instance id: made inside (mkfifo), they live in the sandbox's memory
// (runtime/agent/fifos.go says why) and are in no writable layer, so a
// save or a stop loses them. A FIFO the node also sees at the same path (one
// of the image's) is not listed. nil for a runc instance, whose FIFOs are
// files of its writable layer. The list comes from the instance's exec agent
// binary; an instance without it answers errdefs.ErrUnavailable.
func (r *Runtime) SandboxFIFOs(ctx context.Context, id string) ([]string, error) {
	st, err := r.Status(ctx, id)
	if err != nil {
		return nil, err
	}
	if !st.Exists || st.Class != ClassGVisor {
		return nil, nil
	}
	if st.Task != "running" || st.RootPid == 0 {
		return nil, fmt.Errorf("FIFOs of instance %q: its task is %q: %w", id, st.Task, errdefs.ErrUnavailable)
	}
	var out, stderr bytes.Buffer
	code, err := r.Exec(ctx, id, ExecSpec{Args: []string{AgentPath, "fifos"}, Stdout: &limitWriter{w: &out, n: maxFIFOListing}, Stderr: &limitWriter{w: &stderr, n: 4096}})
	if err != nil {
		return nil, fmt.Errorf("FIFOs of instance %q: %w", id, err)
	}
	if code != 0 {
		return nil, fmt.Errorf("FIFOs of instance %q: envd-agent fifos: exit %d: %s: %w", id, code, strings.TrimSpace(stderr.String()), errdefs.ErrUnavailable)
	}
	var paths []string
	if err := json.Unmarshal(out.Bytes(), &paths); err != nil {
		return nil, fmt.Errorf("FIFOs of instance %q: %v: %w", id, err, errdefs.ErrUnavailable)
	}
	root, err := os.Open(fmt.Sprintf("/proc/%d/root", st.RootPid))
	if err != nil {
		return nil, fmt.Errorf("FIFOs of instance %q: %w", id, err)
	}
	defer root.Close()
	var only []string
	for _, p := range paths {
		if p == agent.FIFOsTruncated {
			only = append(only, p)
			continue
		}
		if !filepath.IsAbs(p) || filepath.Clean(p) != p {
			return nil, fmt.Errorf("FIFOs of instance %q: malformed path %q: %w", id, p, errdefs.ErrUnavailable)
		}
		// The gofer's root is the rootfs the node has: a FIFO there is a
		// file of a layer. The tenant's path is resolved inside that root
		// (its symlinks cannot lead the node elsewhere) and only stat'ed.
		if isFIFOIn(root, p) {
			continue
		}
		only = append(only, p)
	}
	return only, nil
}

// isFIFOIn reports whether path (absolute) names a FIFO under root,
// resolved as if root were "/".
func isFIFOIn(root *os.File, path string) bool {
	fd, err := unix.Openat2(int(root.Fd()), strings.TrimPrefix(path, "/"), &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	return unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFIFO
}

// limitWriter passes on the first n bytes and drops the rest.
type limitWriter struct {
	w interface{ Write([]byte) (int, error) }
	n int
}

func (l *limitWriter) Write(p []byte) (int, error) {
	k := min(len(p), l.n)
	if k > 0 {
		if _, err := l.w.Write(p[:k]); err != nil {
			return 0, err
		}
		l.n -= k
	}
	return len(p), nil
}
