package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/envd-dev/envd/api/mcp"
	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/envd"
	"github.com/envd-dev/envd/envd/node"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// mcpCmd serves the MCP tools over stdio, as a client of a running envd
// (found as envctl finds it).
func mcpCmd() *cobra.Command {
	var url, token, dataDir, caCert string
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "serve envd's MCP tools on stdin/stdout, as a client of an envd API",
		Long: `envd mcp is a Model Context Protocol server on stdio for an agent's host to spawn.
Its tools call the envd API at --url (ENVD_URL, else DATA_DIR/envd.url) with --token
(ENVD_TOKEN, else DATA_DIR/admin.token), so they see what that token's tenant sees.
A token the API refuses is an error at start.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if url == "" {
				b, err := os.ReadFile(filepath.Join(dataDir, "envd.url"))
				if err != nil {
					return fmt.Errorf("no envd server: set --url or ENVD_URL (%w)", err)
				}
				url = strings.TrimSpace(string(b))
			}
			if token == "" {
				b, err := os.ReadFile(filepath.Join(dataDir, "admin.token"))
				if err != nil {
					return fmt.Errorf("no API token: set --token or ENVD_TOKEN (%w)", err)
				}
				token = strings.TrimSpace(string(b))
			}
			opts := []client.Option{client.WithUserAgent("envd-mcp")}
			if caCert == "" {
				if p := filepath.Join(dataDir, "tls", "cert.pem"); strings.HasPrefix(url, "https:") && fileExists(p) {
					caCert = p
				}
			}
			if caCert != "" {
				pem, err := os.ReadFile(caCert)
				if err != nil {
					return err
				}
				opts = append(opts, client.WithCACert(pem))
			}
			c, err := client.New(url, token, opts...)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			err = mcp.CheckToken(cctx, c)
			cancel()
			if err != nil {
				return fmt.Errorf("envd API at %s: %w", url, err)
			}
			return mcp.Serve(ctx, c, envd.BuildVersion, &sdk.StdioTransport{})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&url, "url", os.Getenv("ENVD_URL"), "envd API URL (ENVD_URL; default DATA_DIR/envd.url)")
	fl.StringVar(&token, "token", os.Getenv("ENVD_TOKEN"), "API token (ENVD_TOKEN; default DATA_DIR/admin.token)")
	fl.StringVar(&dataDir, "data-dir", env("ENVD_DATA_DIR", node.DefaultDataDir()), "data dir of a local envd, for its URL, admin token and TLS certificate (ENVD_DATA_DIR)")
	fl.StringVar(&caCert, "ca-cert", os.Getenv("ENVD_CA_CERT"), "PEM certificate to trust for an https URL (ENVD_CA_CERT; default DATA_DIR/tls/cert.pem when present)")
	return cmd
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
