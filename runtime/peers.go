package runtime

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/envd-dev/envd/errdefs"
)

// SetPeerNodes makes every port of hosts, the addresses of the cluster's
// other nodes (IPs or host names, resolved now to IPv4), unreachable from
// every instance, whatever its egress policy, replacing the previous list:
// call it as nodes join and leave. Loopback addresses are skipped (inside
// an instance they are its own). The rules outlive the process until the
// next call. A host name that does not resolve is left out and named in
// the error (ErrUnavailable); the others are applied.
func (r *Runtime) SetPeerNodes(ctx context.Context, hosts []string) error {
	if r.net.rulesOff {
		return nil
	}
	var addrs []string
	var errs []error
	add := func(ip net.IP) {
		if ip4 := ip.To4(); ip4 != nil && !ip4.IsLoopback() && !ip4.IsUnspecified() {
			if s := ip4.String(); !slices.Contains(addrs, s) {
				addrs = append(addrs, s)
			}
		}
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			add(ip)
			continue
		}
		if !hostnameRE.MatchString(h) {
			errs = append(errs, fmt.Errorf("peer node %q: not an address or host name: %w", h, errdefs.ErrInvalidArgument))
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		ips, err := net.DefaultResolver.LookupIP(rctx, "ip4", h)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("peer node %q: resolve: %v: %w", h, err, errdefs.ErrUnavailable))
			continue
		}
		for _, ip := range ips {
			add(ip)
		}
	}
	slices.Sort(addrs)
	if err := r.net.fw.setPeers(addrs); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
