package main

import (
	"context"
	"errors"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/client"
)

// Egress by host name: the denial log of a project, and the tenant's
// brokered secrets (admin tokens), which the node's egress proxy adds as a
// header to plain HTTP requests to the bound host.

func (a *app) egressCommands() []*cobra.Command {
	return []*cobra.Command{a.egressCommand(), a.secretCommand()}
}

func (a *app) egressCommand() *cobra.Command {
	var limit int
	log := &cobra.Command{
		Use:   "log PROJECT [--limit N]",
		Short: "Show what the egress gateway refused to a project's instances, newest first",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(a, cmd, func(ctx context.Context, c *client.Client) ([]types.EgressDenial, error) {
				return c.EgressLog(ctx, args[0], limit)
			}, all(denialTable))
		},
	}
	log.Flags().IntVar(&limit, "limit", 0, "at most this many (default 100, at most 1000)")
	return group("egress", "Egress by host name", log)
}

func denialTable(w io.Writer, ds ...types.EgressDenial) {
	row(w, "TIME", "INSTANCE", "KIND", "NAME", "DEST", "REASON")
	for _, d := range ds {
		row(w, formatTime(d.Time), d.Instance, d.Kind, orDash(d.Name), orDash(d.Dest), d.Reason)
	}
}

func (a *app) secretCommand() *cobra.Command {
	var fromStdin bool
	set := &cobra.Command{
		Use:   "set NAME [VALUE | --stdin]",
		Short: "Store or rotate a secret (the value is never shown again); requests after it carry the new value",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var value string
			switch {
			case fromStdin && len(args) == 1:
				b, err := io.ReadAll(io.LimitReader(a.stdin, 1<<20))
				if err != nil {
					return err
				}
				value = strings.TrimRight(string(b), "\r\n")
			case !fromStdin && len(args) == 2:
				value = args[1]
			default:
				return errors.New("give the value as the second argument or with --stdin")
			}
			return call(a, cmd, func(ctx context.Context, c *client.Client) (types.Secret, error) {
				return c.SetSecret(ctx, args[0], value)
			}, one(secretTable))
		},
	}
	set.Flags().BoolVar(&fromStdin, "stdin", false, "read the value from stdin (keeps it out of the shell history)")
	var b types.SecretBinding
	bind := &cobra.Command{
		Use:   "bind NAME --host HOST [--scheme http|https] [--header H] [--format 'Bearer {{value}}']",
		Short: "Add the secret as a header to the HTTP (or, --scheme https, HTTPS) requests of the tenant's instances to HOST (a name or *.domain; --host '' unbinds)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(a, cmd, func(ctx context.Context, c *client.Client) (types.Secret, error) {
				return c.BindSecret(ctx, args[0], b)
			}, one(secretTable))
		},
	}
	bind.Flags().StringVar(&b.Host, "host", "", "host name or *.domain the header is added for")
	bind.Flags().StringVar(&b.Header, "header", "", "header name (default Authorization)")
	bind.Flags().StringVar(&b.Format, "format", "", "header value, {{value}} standing for the secret (default 'Bearer {{value}}')")
	bind.Flags().StringVar(&b.Scheme, "scheme", "", "http (plain HTTP requests, the default) or https (HTTPS requests: the node's egress proxy terminates TLS for HOST with a certificate of its egress CA, which instances trust)")
	_ = bind.MarkFlagRequired("host")
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List the tenant's secrets and their bindings (never their values)",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return call(a, cmd, func(ctx context.Context, c *client.Client) ([]types.Secret, error) {
				return c.ListSecrets(ctx)
			}, all(secretTable))
		},
	}
	ls.Aliases = []string{"list"}
	rm := &cobra.Command{
		Use:   "rm NAME",
		Short: "Revoke a secret: requests after it go without the header",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(a, cmd, func(ctx context.Context, c *client.Client) (types.Secret, error) {
				return c.DeleteSecret(ctx, args[0])
			}, one(secretTable))
		},
	}
	return group("secret", "Brokered secrets, added to requests outside the instance (admin token)", set, bind, ls, rm)
}

func secretTable(w io.Writer, ss ...types.Secret) {
	row(w, "NAME", "SCHEME", "HOST", "HEADER", "FORMAT", "UPDATED")
	for _, s := range ss {
		scheme, host, header, format := "-", "-", "-", "-"
		if b := s.Binding; b != nil {
			scheme, host, header, format = b.Scheme, b.Host, b.Header, b.Format
		}
		row(w, s.Name, scheme, host, header, format, formatTime(s.UpdatedAt))
	}
}
