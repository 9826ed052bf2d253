package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/client"
)

// Webhooks: the tenant's hooks and their delivery logs.

func (a *app) webhookCommand() *cobra.Command {
	var events []string
	var description string
	add := &cobra.Command{
		Use:   "add URL [--events TYPE,...] [--description TEXT]",
		Short: "Register a webhook; its signing secret is shown once",
		Long: `Register a URL that gets your tenant's events (POST, JSON), signed with a
secret shown only now: keep it to check the Envd-Webhook-Signature header
(see docs/api.md, "Webhooks"). Event types: instance.state, operation.<kind>
(operation.save, operation.build, ...), quota.refused, rollout.step, a
family such as operation.*, or * (the default).`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(a, cmd, func(ctx context.Context, c *client.Client) (types.Webhook, error) {
				return c.CreateWebhook(ctx, types.WebhookRequest{URL: args[0], Events: events, Description: description})
			}, func(w io.Writer, h types.Webhook) {
				webhookTable(w, h)
				fmt.Fprintf(w, "\nsecret: %s\n(shown once: it signs every delivery)\n", h.Secret)
			})
		},
	}
	add.Flags().StringSliceVar(&events, "events", nil, "event types to send (default: all)")
	add.Flags().StringVar(&description, "description", "", "a note on what the hook is for")
	ls := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List your tenant's webhooks",
		Args:    exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return call(a, cmd, func(ctx context.Context, c *client.Client) ([]types.Webhook, error) {
				return c.ListWebhooks(ctx)
			}, all(webhookTable))
		},
	}
	rm := &cobra.Command{
		Use:   "rm ID",
		Short: "Remove a webhook and its delivery log",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(a, cmd, func(ctx context.Context, c *client.Client) (types.Webhook, error) {
				return c.DeleteWebhook(ctx, args[0])
			}, one(webhookTable))
		},
	}
	test := &cobra.Command{
		Use:   "test ID",
		Short: "Send a webhook.test event to one webhook (after its pending deliveries)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(a, cmd, func(ctx context.Context, c *client.Client) (types.WebhookDelivery, error) {
				return c.TestWebhook(ctx, args[0])
			}, one(deliveryTable))
		},
	}
	deliveries := &cobra.Command{
		Use:   "deliveries ID",
		Short: "A webhook's newest deliveries: state, attempts, last answer",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(a, cmd, func(ctx context.Context, c *client.Client) ([]types.WebhookDelivery, error) {
				return c.WebhookDeliveries(ctx, args[0])
			}, all(deliveryTable))
		},
	}
	return group("webhook", "Your tenant's webhooks and their deliveries", add, ls, rm, test, deliveries)
}

func webhookTable(w io.Writer, hs ...types.Webhook) {
	row(w, "ID", "URL", "EVENTS", "CREATED", "DESCRIPTION")
	for _, h := range hs {
		row(w, h.ID, h.URL, strings.Join(h.Events, ","), formatTime(h.CreatedAt), h.Description)
	}
}

func deliveryTable(w io.Writer, ds ...types.WebhookDelivery) {
	row(w, "ID", "EVENT", "TYPE", "STATE", "ATTEMPTS", "CODE", "LAST ERROR")
	for _, d := range ds {
		code := "-"
		if d.ResponseCode != 0 {
			code = fmt.Sprint(d.ResponseCode)
		}
		row(w, d.ID, d.Event.Seq, d.Event.Type, d.State, d.Attempts, code, d.LastError)
	}
}
