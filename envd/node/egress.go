package node

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/envd-dev/envd/envd"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/runtime/egress"
)

// egressHooks forward the egress gateway's callbacks to the service, which
// is made after the runtime the gateway serves.
type egressHooks struct{ svc atomic.Pointer[envd.Service] }

func (h *egressHooks) deny(d egress.Denial) {
	if s := h.svc.Load(); s != nil {
		s.Parts().Egress.EgressDenied(d)
	}
}

func (h *egressHooks) headers(ctx context.Context, key, scheme, host string) ([]egress.Header, error) {
	s := h.svc.Load()
	if s == nil {
		return nil, fmt.Errorf("service not started: %w", errdefs.ErrUnavailable)
	}
	return s.Parts().Egress.SecretHeaders(ctx, key, scheme, host)
}

// egressGateway makes the node's egress gateway (runtime/egress) with
// Config.EgressResolvers as its upstream. A node without an upstream (no
// flag, no nameserver in /etc/resolv.conf) runs without one: projects whose
// egress names hosts then fail to start, saying so.
//
// The gateway terminates TLS for hosts with an HTTPS secret binding with
// the node's egress CA (egressCA); a CA or upstream roots that cannot be
// read fail the start, since they were asked for.
func (n *Node) egressGateway() (*egress.Gateway, error) {
	ca, err := egressCA(n.cfg.DataDir, n.cfg.EgressCAFile)
	if err != nil {
		return nil, err
	}
	roots, err := upstreamRoots(n.cfg.EgressUpstreamCAFile)
	if err != nil {
		return nil, err
	}
	gw, err := egress.New(egress.Config{Upstream: n.cfg.EgressResolvers, OnDeny: n.egress.deny, Headers: n.egress.headers,
		CA: ca, UpstreamRoots: roots})
	if err != nil {
		n.cfg.Logger.Warn("no egress gateway: egress by host name unavailable", "err", err)
		n.components["egress gateway"] = "unavailable: " + err.Error()
		return nil, nil
	}
	n.components["egress gateway"] = "resolver and proxy on the bridge, upstream " + strings.Join(n.cfg.EgressResolvers, ",")
	if len(n.cfg.EgressResolvers) == 0 {
		n.components["egress gateway"] += "/etc/resolv.conf"
	}
	n.components["egress gateway"] += "; TLS terminated for HTTPS secret bindings, CA " + ca.Subject()
	return gw, nil
}

// egressCA reads the egress CA from path (Config.EgressCAFile), or, when
// no file is named, from DataDir/egress-ca.pem, made on first start
// (mode 0600, like the secret key: it is the node's to keep).
func egressCA(dataDir, path string) (*egress.CA, error) {
	made := path == ""
	if made {
		path = filepath.Join(dataDir, "egress-ca.pem")
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) && made {
		host, _ := os.Hostname()
		cert, key, err := egress.GenerateCA("envd egress CA " + host)
		if err != nil {
			return nil, fmt.Errorf("egress CA: %w", err)
		}
		b = append(cert, key...)
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, b, 0o600); err != nil {
			return nil, fmt.Errorf("egress CA: %w", err)
		}
		if err := os.Rename(tmp, path); err != nil {
			return nil, fmt.Errorf("egress CA: %w", err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("egress CA: %w", err)
	}
	ca, err := egress.ParseCA(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %v: %w", path, err, errdefs.ErrInvalidArgument)
	}
	return ca, nil
}

// upstreamRoots are the system's roots plus those of path, if named.
func upstreamRoots(path string) (*x509.CertPool, error) {
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if path == "" {
		return pool, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("egress upstream CA: %w", err)
	}
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("egress upstream CA %s: no PEM certificate in it: %w", path, errdefs.ErrInvalidArgument)
	}
	return pool, nil
}

// secretKey reads the key that seals brokered secrets: 64 hex digits in
// path (Config.SecretKeyFile), or, when no file is named, in
// DataDir/secret.key, made on first start (mode 0600). Every node of a
// cluster must be given the same key.
func secretKey(dataDir, path string) ([]byte, error) {
	made := path == ""
	if made {
		path = filepath.Join(dataDir, "secret.key")
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) && made {
		k := make([]byte, envd.SecretKeySize)
		if _, err := rand.Read(k); err != nil {
			return nil, err
		}
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(hex.EncodeToString(k)+"\n"), 0o600); err != nil {
			return nil, fmt.Errorf("secret key: %w", err)
		}
		if err := os.Rename(tmp, path); err != nil {
			return nil, fmt.Errorf("secret key: %w", err)
		}
		return k, nil
	}
	if err != nil {
		return nil, fmt.Errorf("secret key: %w", err)
	}
	k, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(k) != envd.SecretKeySize {
		return nil, fmt.Errorf("secret key %s: want %d hex digits: %w", path, 2*envd.SecretKeySize, errdefs.ErrInvalidArgument)
	}
	return k, nil
}
