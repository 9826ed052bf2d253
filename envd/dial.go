package envd

import (
	"context"
	"net"
	"strconv"

	"github.com/envd-dev/envd/api/types"
)

// DialInstance opens a TCP connection to port of a running instance, as
// a process inside it would reach 127.0.0.1:port.
func (s *Service) DialInstance(ctx context.Context, p types.Principal, id string, port int) (net.Conn, error) {
	in, err := s.GetInstance(ctx, p, id)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", net.JoinHostPort(in.Address, strconv.Itoa(port)))
}
