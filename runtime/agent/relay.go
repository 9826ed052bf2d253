package agent

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"strconv"
	"syscall"

	"github.com/envd-dev/envd/internal/netns"
)

// The agent binary's helper commands, run inside an instance through an
// exec like any command (cmd/envd-agent). They serve the node where it
// cannot reach the instance's network stack itself: on gVisor, whose
// sockets live in the sandbox's own stack.
//
//	envd-agent relay PORT    connect to 127.0.0.1:PORT (else [::1]:PORT),
//	                         write RelayReady to stdout, then copy stdin to
//	                         the connection and the connection to stdout;
//	                         nothing listening: exit RelayRefused, no output
//	envd-agent listening     print the instance's TCP listeners as a JSON
//	                         array of netns.Listener, from /proc/net/tcp{,6}
const (
	// RelayReady is the one byte relay writes once connected.
	RelayReady byte = 0
	// RelayRefused is relay's exit code when nothing listens on the port.
	RelayRefused = 3
)

// ErrRefused is Relay's error when nothing listens on the port.
var ErrRefused = errors.New("nothing listens on the port")

// Relay is `envd-agent relay PORT` (see above). It returns when the
// connection's peer has closed and all its data reached out.
func Relay(ctx context.Context, port int, in io.Reader, out io.Writer) error {
	var (
		conn net.Conn
		err  error
		d    net.Dialer
	)
	for _, host := range []string{"127.0.0.1", "::1"} {
		conn, err = d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err == nil || !(errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EADDRNOTAVAIL) || errors.Is(err, syscall.ENETUNREACH)) {
			break
		}
	}
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EADDRNOTAVAIL) || errors.Is(err, syscall.ENETUNREACH) {
			return ErrRefused
		}
		return err
	}
	defer conn.Close()
	if _, err := out.Write([]byte{RelayReady}); err != nil {
		return err
	}
	go func() {
		_, _ = io.Copy(conn, in)
		// The node's side finished writing: pass the EOF on.
		if cw, ok := conn.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
	}()
	_, err = io.Copy(out, conn)
	return err
}

// PrintListening is `envd-agent listening` (see above).
func PrintListening(out io.Writer) error {
	ls, err := netns.Listening(-1)
	if err != nil {
		return err
	}
	if ls == nil {
		ls = []netns.Listener{}
	}
	return json.NewEncoder(out).Encode(ls)
}
