package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"

	"github.com/envd-dev/envd/api/types"

	"github.com/spf13/cobra"

	"github.com/envd-dev/envd/client"
)

// portCommands are the port proxy's commands: port-forward, ports,
// preview, public-ports.
func (a *app) portCommands() []*cobra.Command {
	return []*cobra.Command{a.portForwardCommand(), a.portsCommand(), a.previewCommand(), a.publicPortsCommand()}
}

// forward is one [LOCAL:]REMOTE argument of port-forward.
type forward struct{ local, remote int }

func parseForward(s string) (forward, error) {
	port := func(p string) (int, error) {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || n > 65535 {
			return 0, fmt.Errorf("port %q: must be a number from 0 to 65535", p)
		}
		return n, nil
	}
	l, r, two := strings.Cut(s, ":")
	if !two {
		r = l
	}
	remote, err := port(r)
	if err != nil || remote == 0 {
		return forward{}, usageError{fmt.Errorf("%s: the remote port must be from 1 to 65535", s)}
	}
	local := remote
	if two {
		if l == "" {
			local = 0
		} else if local, err = port(l); err != nil {
			return forward{}, usageError{fmt.Errorf("%s: %v", s, err)}
		}
	}
	return forward{local: local, remote: remote}, nil
}

func (a *app) portForwardCommand() *cobra.Command {
	var address string
	cmd := &cobra.Command{
		Use:   "port-forward INSTANCE [LOCAL:]REMOTE...",
		Short: "Forward local TCP ports to ports of an instance",
		Long: `Listen on local ports and tunnel each connection to a port of the instance,
as a process inside it would reach 127.0.0.1:REMOTE (so servers bound to the
instance's loopback are reached too), over a WebSocket to envd, like kubectl
port-forward. REMOTE alone listens on the same port locally; :REMOTE or
0:REMOTE on a free port (printed). Half-closed connections stay open in the
other direction. Runs until interrupted; a stopped instance is started by the
first connection.`,
		Example: `  envctl port-forward web-1a2b3c4d 5432          # psql -h 127.0.0.1 -p 5432
  envctl port-forward web-1a2b3c4d 8080:3000 :9229`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 2 {
				return usageError{fmt.Errorf("%s: want INSTANCE and at least one [LOCAL:]REMOTE (usage: %s)", cmdName(cmd), cmd.UseLine())}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			var fwds []forward
			for _, s := range args[1:] {
				f, err := parseForward(s)
				if err != nil {
					return err
				}
				fwds = append(fwds, f)
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			var lns []net.Listener
			defer func() {
				for _, ln := range lns {
					ln.Close()
				}
			}()
			for _, f := range fwds {
				ln, err := net.Listen("tcp", net.JoinHostPort(address, strconv.Itoa(f.local)))
				if err != nil {
					return err
				}
				lns = append(lns, ln)
				fmt.Fprintf(a.stdout, "Forwarding from %s -> %d\n", ln.Addr(), f.remote)
			}
			var wg sync.WaitGroup
			for i, ln := range lns {
				wg.Add(1)
				go func() {
					defer wg.Done()
					a.acceptForward(ctx, c, id, fwds[i].remote, ln)
				}()
			}
			<-ctx.Done()
			for _, ln := range lns {
				ln.Close()
			}
			wg.Wait()
			return nil
		},
	}
	cmd.Flags().StringVar(&address, "address", "127.0.0.1", "local address to listen on")
	return cmd
}

// acceptForward tunnels every connection ln accepts to remote until ln is
// closed.
func (a *app) acceptForward(ctx context.Context, c *client.Client, id string, remote int, ln net.Listener) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		local, err := ln.Accept()
		if err != nil {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer local.Close()
			tun, err := c.DialPort(ctx, id, remote)
			if err != nil {
				fmt.Fprintf(a.stderr, "port-forward: connection from %s to port %d: %v\n", local.RemoteAddr(), remote, err)
				return
			}
			defer tun.Close()
			pipe(local, tun)
		}()
	}
}

// halfCloser is a connection whose write side can be shut down alone.
type halfCloser interface{ CloseWrite() error }

// pipe copies both ways, passing each side's EOF on as a half-close, until
// both directions ended.
func pipe(a, b net.Conn) {
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, err := io.Copy(dst, src)
		if hc, ok := dst.(halfCloser); ok && err == nil {
			_ = hc.CloseWrite()
		} else {
			// A broken direction ends both: closing unblocks the other copy.
			_ = a.Close()
			_ = b.Close()
		}
		done <- struct{}{}
	}
	go cp(a, b)
	go cp(b, a)
	<-done
	<-done
}

func (a *app) portsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "ports INSTANCE",
		Short: "List the TCP ports a running instance listens on",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(a, cmd, func(ctx context.Context, c *client.Client) ([]types.ListeningPort, error) {
				return c.ListPorts(ctx, args[0])
			}, func(w io.Writer, ps []types.ListeningPort) {
				row(w, "PORT", "ADDRESS", "PROTOCOL", "PUBLIC", "FORWARDED", "URL")
				for _, p := range ps {
					fwd := "-"
					if p.Forwarded {
						fwd = "yes"
						if p.Label != "" {
							fwd = p.Label
						}
					}
					row(w, p.Port, p.Address, p.Protocol, p.Public, fwd, orDash(p.URL))
				}
			})
		},
	}
}

func (a *app) previewCommand() *cobra.Command {
	var ttl string
	cmd := &cobra.Command{
		Use:   "preview INSTANCE PORT [--ttl D]",
		Short: "Print a preview URL (with a signed, expiring token) for a port of an instance",
		Long: `Print the preview URL of a port: {port}-{instance}.{preview domain}, with a token
that opens it until it expires (default 1h, at most 168h). Opening the URL sets
a cookie for that host and drops the token from the address. The server needs a
preview domain (envd --preview-domain); without one only the token is printed.`,
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			port, err := strconv.Atoi(args[1])
			if err != nil {
				return usageError{fmt.Errorf("port %q: must be a number", args[1])}
			}
			return call(a, cmd, func(ctx context.Context, c *client.Client) (types.PreviewToken, error) {
				return c.PreviewToken(ctx, args[0], port, ttl)
			}, func(w io.Writer, t types.PreviewToken) {
				if t.URL != "" {
					fmt.Fprintln(w, t.URL)
				} else {
					fmt.Fprintln(w, t.Token)
				}
			})
		},
	}
	cmd.Flags().StringVar(&ttl, "ttl", "", "how long the token is valid (Go duration; default 1h)")
	return cmd
}

func (a *app) publicPortsCommand() *cobra.Command {
	var clear bool
	cmd := &cobra.Command{
		Use:   "public-ports PROJECT [PORT...] [--clear]",
		Short: "Show or set the ports of a project's instances that need no preview token",
		Long: `Without ports, show the project's public ports. With ports, make exactly those
public: their preview URLs ({port}-{instance}.{preview domain}) open for anyone
who has them, without a token. --clear makes none public. The project's
forwarded ports (a devcontainer.json's forwardPorts, "envctl build
--devcontainer") are shown and stay as they are.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 1 {
				return usageError{fmt.Errorf("%s: want PROJECT (usage: %s)", cmdName(cmd), cmd.UseLine())}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			var ports []int
			for _, s := range args[1:] {
				for part := range strings.SplitSeq(s, ",") {
					n, err := strconv.Atoi(part)
					if err != nil {
						return usageError{fmt.Errorf("port %q: must be a number", part)}
					}
					ports = append(ports, n)
				}
			}
			if clear && len(ports) > 0 {
				return usageError{errors.New("public-ports: --clear takes no ports")}
			}
			set := clear || len(ports) > 0
			return call(a, cmd, func(ctx context.Context, c *client.Client) (types.ProjectPorts, error) {
				if !set {
					return c.ProjectPorts(ctx, args[0])
				}
				return c.SetProjectPorts(ctx, args[0], types.ProjectPorts{Public: ports})
			}, func(w io.Writer, p types.ProjectPorts) {
				s := make([]string, len(p.Public))
				for i, n := range p.Public {
					s[i] = strconv.Itoa(n)
				}
				row(w, "PUBLIC PORTS:", orDash(strings.Join(s, ", ")))
				f := make([]string, len(p.Forwarded))
				for i, fp := range p.Forwarded {
					f[i] = strconv.Itoa(fp.Port)
					if fp.Label != "" {
						f[i] += " (" + fp.Label + ")"
					}
				}
				row(w, "FORWARDED PORTS:", orDash(strings.Join(f, ", ")))
			})
		},
	}
	cmd.Flags().BoolVar(&clear, "clear", false, "make no port public")
	return cmd
}
