package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/envd-dev/envd/api/types"

	"github.com/spf13/cobra"

	"github.com/envd-dev/envd/client"
)

// adminTokenCommand is `envctl admin token`: create, ls and revoke. The
// older form `envctl admin token TENANT` still creates (a tenant named
// like a subcommand needs `token create NAME`).
func (a *app) adminTokenCommand() *cobra.Command {
	var req types.CreateTokenRequest
	create := func(cmd *cobra.Command, args []string) error {
		return call(a, cmd, func(ctx context.Context, c *client.Client) (types.Token, error) {
			return c.CreateToken(ctx, args[0], req)
		}, func(w io.Writer, t types.Token) { row(w, t.Token) })
	}
	flags := func(cmd *cobra.Command) {
		cmd.Flags().BoolVar(&req.Admin, "admin", false, "an admin token (quotas, gc, images, every tenant's usage and tokens)")
		cmd.Flags().StringVar(&req.ExpiresIn, "expires", "", "lifetime, a Go duration such as 720h (default: never expires)")
	}
	token := &cobra.Command{
		Use:   "token [create] TENANT [--admin] [--expires D] | token ls [TENANT] | token revoke ID",
		Short: "Create, list or revoke API tokens (a new token is shown once)",
		Long: `Create, list or revoke API tokens.
  envctl admin token create TENANT [--admin] [--expires 720h]
      create a token of TENANT (creating the tenant); it is printed once and
      stored only hashed. "envctl admin token TENANT" is the same.
  envctl admin token ls [TENANT]
      list tokens (every tenant's without TENANT): id, tenant, admin, created,
      expiry, last use (to the minute) and state; never the token.
  envctl admin token revoke ID
      revoke a token: requests with it get 401 from then on. The last live
      admin token cannot be revoked.
A tenant lists and revokes its own tokens with "envctl token ls|revoke".
"envctl admin token" alone lists every tenant's tokens, as ls does.`,
		Args: rangeArgs(0, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				if cmd.Flags().Changed("admin") || cmd.Flags().Changed("expires") {
					return usageError{fmt.Errorf("%s: --admin and --expires need the TENANT to create a token of", cmdName(cmd))}
				}
				ls := lsVerb(cmd)
				ls.SetContext(cmd.Context())
				return ls.RunE(ls, nil)
			}
			return create(cmd, args)
		},
	}
	flags(token)
	createCmd := &cobra.Command{
		Use:   "create TENANT [--admin] [--expires D]",
		Short: "Create an API token of a tenant (creating the tenant); it is shown once",
		Args:  exactArgs(1),
		RunE:  create,
	}
	flags(createCmd)
	ls := &cobra.Command{
		Use:   "ls [TENANT]",
		Short: "List API tokens (never the tokens themselves)",
		Args:  rangeArgs(0, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			tenant := ""
			if len(args) == 1 {
				tenant = args[0]
			}
			return call(a, cmd, func(ctx context.Context, c *client.Client) ([]types.TokenInfo, error) {
				return c.ListTokens(ctx, tenant)
			}, all(tokenTable))
		},
	}
	revoke := a.revokeTokenCommand("Revoke an API token: it gets 401 from then on", (*client.Client).RevokeToken)
	token.AddCommand(createCmd, ls, revoke)
	return token
}

// ownTokenCommand is `envctl token ls|revoke`: a tenant's own tokens.
func (a *app) ownTokenCommand() *cobra.Command {
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List your tenant's API tokens (never the tokens themselves)",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return call(a, cmd, func(ctx context.Context, c *client.Client) ([]types.TokenInfo, error) {
				return c.ListOwnTokens(ctx)
			}, all(tokenTable))
		},
	}
	revoke := a.revokeTokenCommand("Revoke one of your tenant's (non-admin) tokens, the one you use included", (*client.Client).RevokeOwnToken)
	return group("token", "Your tenant's API tokens", ls, revoke)
}

func tokenIDArg(s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id < 1 {
		return 0, usageError{fmt.Errorf("token id %q: must be a positive integer (see token ls)", s)}
	}
	return id, nil
}

func tokenState(t types.TokenInfo) string {
	switch {
	case t.RevokedAt != nil:
		return "revoked"
	case t.ExpiresAt != nil && !t.ExpiresAt.After(time.Now()):
		return "expired"
	}
	return "live"
}

func tokenTable(w io.Writer, ts ...types.TokenInfo) {
	row(w, "ID", "TENANT", "ADMIN", "CREATED", "EXPIRES", "LAST USED", "STATE")
	for _, t := range ts {
		row(w, t.ID, t.Tenant, yesNo(t.Admin), formatTime(t.CreatedAt), formatTimePtr(t.ExpiresAt),
			formatTimePtr(t.LastUsedAt), tokenState(t))
	}
}

// revokeTokenCommand is `revoke ID` with revoke, the admin's or a tenant's
// own route.
func (a *app) revokeTokenCommand(short string, revoke func(*client.Client, context.Context, int64) (types.TokenInfo, error)) *cobra.Command {
	return &cobra.Command{
		Use:   "revoke ID",
		Short: short,
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := tokenIDArg(args[0])
			if err != nil {
				return err
			}
			return call(a, cmd, func(ctx context.Context, c *client.Client) (types.TokenInfo, error) {
				return revoke(c, ctx, id)
			}, one(tokenTable))
		},
	}
}
