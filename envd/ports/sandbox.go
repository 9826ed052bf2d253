package ports

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/internal/netns"
	"github.com/envd-dev/envd/runtime"
	"github.com/envd-dev/envd/runtime/agent"
)

// Ports of a gVisor instance. Its sockets live in gVisor's network stack,
// inside the sandbox: the node's view of its network namespace neither
// lists them nor has its loopback. So:
//   - a dial goes first to the instance's address on the bridge, which
//     reaches servers listening on every address (0.0.0.0, ::); when
//     nothing answers there, through a relay inside the instance
//     (`envd-agent relay PORT`, run by an exec), which reaches servers
//     bound to 127.0.0.1 or ::1 as on runc. A relayed connection is one
//     process in the instance while it is open (it counts against the
//     instance's pids limit).
//   - the listening ports come from `envd-agent listening`, which reads
//     the sandbox's own /proc/net/tcp{,6}.

// maxListingBytes bounds what the listing of a sandbox may print (the
// instance's side is untrusted).
const maxListingBytes = 1 << 20

// dialSandbox opens a connection to port of gVisor instance id, whose
// address on the bridge is addr ("" = not known), within dctx.
func (pt *Ports) dialSandbox(ctx, dctx context.Context, id, addr string, port int) (net.Conn, error) {
	if addr != "" {
		var d net.Dialer
		conn, err := d.DialContext(dctx, "tcp", net.JoinHostPort(addr, strconv.Itoa(port)))
		if err == nil {
			return conn, nil
		}
		if !refused(err) {
			return nil, err
		}
	}
	return pt.relay(ctx, dctx, id, port)
}

// relay starts `envd-agent relay PORT` in instance id and returns the
// node's end of its standard streams once it has connected. The process
// lives until the returned connection is closed or its peer closes.
func (pt *Ports) relay(ctx, dctx context.Context, id string, port int) (net.Conn, error) {
	node, inside := net.Pipe()
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	type result struct {
		code int
		err  error
	}
	exited := make(chan result, 1)
	var stderr limitedBuffer
	go func() {
		code, err := pt.rt.Exec(rctx, id, runtime.ExecSpec{
			Args:  []string{runtime.AgentPath, "relay", strconv.Itoa(port)},
			Stdin: inside, Stdout: inside, Stderr: &stderr,
		})
		inside.Close()
		exited <- result{code, err}
	}()
	fail := func(err error) (net.Conn, error) {
		node.Close()
		cancel()
		return nil, err
	}
	if dl, ok := dctx.Deadline(); ok {
		_ = node.SetReadDeadline(dl)
	}
	ready := make([]byte, 1)
	if _, err := io.ReadFull(node, ready); err == nil && ready[0] == agent.RelayReady {
		_ = node.SetReadDeadline(time.Time{})
		return &relayConn{Conn: node, cancel: cancel}, nil
	}
	if dctx.Err() != nil {
		return fail(dctx.Err())
	}
	r := <-exited
	switch {
	case r.err != nil:
		return fail(fmt.Errorf("relay to port %d in instance %q: %w", port, id, r.err))
	case r.code == agent.RelayRefused:
		return fail(fmt.Errorf("port %d of instance %q: nothing listens on it (its address, 127.0.0.1 nor ::1): %w", port, id, errdefs.ErrPortUnreachable))
	}
	return fail(fmt.Errorf("relay to port %d in instance %q: exit %d: %s: %w", port, id, r.code, bytes.TrimSpace(stderr.Bytes()), errdefs.ErrUnavailable))
}

// relayConn is the node's end of a relay; Close ends the relay process.
type relayConn struct {
	net.Conn
	cancel context.CancelFunc
}

func (c *relayConn) Close() error {
	err := c.Conn.Close()
	c.cancel()
	return err
}

// listSandbox returns the TCP listeners of gVisor instance id.
func (pt *Ports) listSandbox(ctx context.Context, id string) ([]netns.Listener, error) {
	var out, stderr limitedBuffer
	out.max = maxListingBytes
	code, err := pt.rt.Exec(ctx, id, runtime.ExecSpec{Args: []string{runtime.AgentPath, "listening"}, Stdout: &out, Stderr: &stderr})
	if err != nil {
		return nil, err
	}
	if code != 0 || out.over {
		return nil, fmt.Errorf("listing in the instance: exit %d: %s: %w", code, bytes.TrimSpace(stderr.Bytes()), errdefs.ErrUnavailable)
	}
	var ls []netns.Listener
	if err := json.Unmarshal(out.Bytes(), &ls); err != nil {
		return nil, fmt.Errorf("listing in the instance: %v: %w", err, errdefs.ErrUnavailable)
	}
	for _, l := range ls {
		if net.ParseIP(l.Address) == nil || l.Port < 1 || l.Port > 65535 || (l.Protocol != "tcp" && l.Protocol != "tcp6") {
			return nil, fmt.Errorf("listing in the instance: malformed listener %+v: %w", l, errdefs.ErrUnavailable)
		}
	}
	return ls, nil
}

// limitedBuffer keeps the first max bytes written (default 4 KiB) and
// drops the rest, noting that it did.
type limitedBuffer struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	max  int
	over bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	max := b.max
	if max == 0 {
		max = 4 << 10
	}
	if room := max - b.buf.Len(); len(p) > room {
		b.over = true
		b.buf.Write(p[:room])
		return len(p), nil
	}
	b.buf.Write(p)
	return len(p), nil
}

func (b *limitedBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Bytes()
}
