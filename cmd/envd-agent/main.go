// Command envd-agent runs inside a container and starts commands for the
// envd host: it dials the host's unix socket SOCKET and serves it (see
// package runtime/agent), redialing when the connection ends, until SIGTERM
// or SIGINT.
//
// Usage:
//
//	envd-agent SOCKET
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/envd-dev/envd/runtime/agent"
)

func main() {
	if len(os.Args) != 2 || os.Args[1] == "" || os.Args[1][0] == '-' {
		fmt.Fprintln(os.Stderr, "usage: envd-agent SOCKET")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := agent.Run(ctx, os.Args[1], agent.ServeOptions{}); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "envd-agent:", err)
		os.Exit(1)
	}
}
