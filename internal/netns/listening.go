package netns

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
)

// Listener is a TCP socket in LISTEN state.
type Listener struct {
	Address  string // IP address, "0.0.0.0" or "::" for any
	Port     int
	Protocol string // "tcp" or "tcp6"
}

// tcpListen is the state column's value for LISTEN (include/net/tcp_states.h).
const tcpListen = "0A"

// Listening returns the TCP listeners of the network namespace process pid
// (-1: this process) is in, from /proc/PID/net/tcp and /proc/PID/net/tcp6
// (a kernel without IPv6 has no tcp6: it is skipped), in file order.
func Listening(pid int) ([]Listener, error) {
	proc := fmt.Sprintf("/proc/%d", pid)
	if pid == -1 {
		proc = "/proc/self"
	}
	var out []Listener
	for _, proto := range []string{"tcp", "tcp6"} {
		f, err := os.Open(proc + "/net/" + proto)
		if err != nil {
			if proto == "tcp6" && os.IsNotExist(err) {
				continue
			}
			return nil, err
		}
		ls, err := ParseListening(f, proto)
		f.Close()
		if err != nil {
			return nil, err
		}
		out = append(out, ls...)
	}
	return out, nil
}

// ParseListening reads a /proc/net/tcp or tcp6 table (proto "tcp" or
// "tcp6") and returns its LISTEN sockets. Addresses are hex in the
// kernel's byte order: each 32-bit word is little-endian on the machines
// envd runs on (amd64, arm64).
func ParseListening(r io.Reader, proto string) ([]Listener, error) {
	var out []Listener
	sc := bufio.NewScanner(r)
	first := true
	for sc.Scan() {
		if first { // the header line
			first = false
			continue
		}
		f := strings.Fields(sc.Text())
		if len(f) < 4 || f[3] != tcpListen {
			continue
		}
		addr, portHex, ok := strings.Cut(f[1], ":")
		if !ok {
			return nil, fmt.Errorf("%s table: malformed local address %q", proto, f[1])
		}
		port, err := strconv.ParseUint(portHex, 16, 16)
		if err != nil {
			return nil, fmt.Errorf("%s table: malformed port %q", proto, portHex)
		}
		raw, err := hex.DecodeString(addr)
		if err != nil || (len(raw) != 4 && len(raw) != 16) {
			return nil, fmt.Errorf("%s table: malformed address %q", proto, addr)
		}
		ip := make(net.IP, len(raw))
		for i := 0; i < len(raw); i += 4 {
			binary.BigEndian.PutUint32(ip[i:], binary.LittleEndian.Uint32(raw[i:]))
		}
		out = append(out, Listener{Address: ip.String(), Port: int(port), Protocol: proto})
	}
	return out, sc.Err()
}
