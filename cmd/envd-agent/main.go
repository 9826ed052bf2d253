// Command envd-agent runs inside a container and starts commands for the
// envd host: it dials the host's unix socket SOCKET and serves it (see
// package runtime/agent), redialing when the connection ends, until SIGTERM
// or SIGINT. Its helper commands (relay, listening, fifos) are run by the
// host through an exec (runtime/agent/relay.go, fifos.go).
//
// Usage:
//
//	envd-agent SOCKET
//	envd-agent relay PORT
//	envd-agent listening
//	envd-agent fifos
//
// Linked under the name envd-build-net it is instead the CNI plugin of
// BuildKit's RUN steps (package builder/buildkit/netplugin): one static
// binary the node already has, nothing more to install.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/envd-dev/envd/builder/buildkit/netplugin"
	"github.com/envd-dev/envd/runtime/agent"
)

func main() {
	if filepath.Base(os.Args[0]) == netplugin.Type {
		os.Exit(netplugin.Main())
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	switch {
	case len(os.Args) == 3 && os.Args[1] == "relay":
		port, err := strconv.Atoi(os.Args[2])
		if err != nil || port < 1 || port > 65535 {
			fail(2, "envd-agent relay: port %q: must be from 1 to 65535", os.Args[2])
		}
		if err := agent.Relay(ctx, port, os.Stdin, os.Stdout); err != nil {
			if errors.Is(err, agent.ErrRefused) {
				os.Exit(agent.RelayRefused)
			}
			fail(1, "envd-agent relay: %v", err)
		}
		return
	case len(os.Args) == 2 && os.Args[1] == "listening":
		if err := agent.PrintListening(os.Stdout); err != nil {
			fail(1, "envd-agent listening: %v", err)
		}
		return
	case len(os.Args) == 2 && os.Args[1] == "fifos":
		if err := agent.PrintFIFOs(os.Stdout); err != nil {
			fail(1, "envd-agent fifos: %v", err)
		}
		return
	}
	if len(os.Args) != 2 || os.Args[1] == "" || os.Args[1][0] == '-' {
		fail(2, "usage: envd-agent SOCKET | relay PORT | listening | fifos")
	}
	if err := agent.Run(ctx, os.Args[1], agent.ServeOptions{}); err != nil && !errors.Is(err, context.Canceled) {
		fail(1, "envd-agent: %v", err)
	}
}

func fail(code int, format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(code)
}
