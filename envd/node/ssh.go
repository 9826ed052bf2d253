package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"

	"github.com/envd-dev/envd/api"
	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/sshd"
)

// DefaultSSHListen is the SSH endpoint's address: loopback, a free port
// (the chosen one is written to DataDir/ssh.addr and shown by
// GET /v1/info).
const DefaultSSHListen = "127.0.0.1:0"

// startSSH serves the SSH endpoint on Config.SSHListen ("" = none) with
// the host key kept in DataDir/ssh_host_ed25519_key (made at first
// start). It runs before the API, whose tunnel route it serves.
func (n *Node) startSSH(_ context.Context) error {
	if n.cfg.SSHListen == "" {
		return nil
	}
	key, err := sshd.LoadOrCreateHostKey(filepath.Join(n.cfg.DataDir, "ssh_host_ed25519_key"))
	if err != nil {
		return err
	}
	srv, err := sshd.New(n.Service.Core(), key, sshd.WithLogger(n.cfg.Logger), sshd.WithNode(n.cfg.Node))
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", n.cfg.SSHListen)
	if err != nil {
		return fmt.Errorf("ssh listen %s: %w", n.cfg.SSHListen, err)
	}
	addr := ln.Addr().String()
	if err := writeFileAtomic(filepath.Join(n.cfg.DataDir, "ssh.addr"), []byte(addr+"\n"), 0o644); err != nil {
		ln.Close()
		return err
	}
	n.sshInfo = sshd.HostKeyInfo(addr, key.PublicKey())
	n.Service.SetSSHInfo(n.sshInfo)
	n.ssh = srv
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, net.ErrClosed) {
			n.cfg.Logger.Error("ssh server", "err", err)
		}
	}()
	n.onClose(func(context.Context) error { return srv.Close() })
	return nil
}

// apiSSH gives the API the SSH server for its tunnel route.
func (n *Node) apiSSH() []api.Option {
	if n.ssh == nil {
		return nil
	}
	return []api.Option{api.WithSSH(n.ssh)}
}

// SSH is where the node's SSH endpoint listens and its host key; nil when
// it serves none.
func (n *Node) SSH() *types.SSHInfo { return n.sshInfo }
