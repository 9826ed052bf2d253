package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/client"
)

const idleHelp = `An instance Running without activity (exec and terminal sessions, terminal
input, file API calls, proxied requests, SSH sessions) for --after is stopped:
with --action stop a retained instance keeps its layer on the node; with
--action hibernate (and always for an instance that is not retained) its layer
is first saved as a version that does not become current (listed by envctl
versions, and envctl switch can make it current), then the instance stops and
its layer is freed. Any access (envctl exec --wake, files, ports, SSH) wakes
it, on any node for a hibernated one. With --action hibernate-memory a running
instance is hibernated with its processes (runtime class gvisor), and any access
resumes them where they were; where memory cannot be kept (class runc, a TCP
connection to a peer outside the instance, the engine refuses) it hibernates as
with hibernate and envctl show says why (MEMORY NOT KEPT). --after 0 never stops it; without a
setting the node's default applies. The tenant's maximum (envctl admin quota
--max-idle-after) refuses longer settings.`

// idleFlags are the idle setting of envctl project create.
type idleFlags struct{ after, action string }

func (f *idleFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&f.after, "idle-after", "", "stop instances after this long without activity, e.g. 30m; 0 = never (default: the node's)")
	fs.StringVar(&f.action, "idle-action", "", "what idle does: stop (a retained instance keeps its layer), hibernate (saved as a version, layer freed) or hibernate-memory (also its processes)")
}

func (f *idleFlags) setting() *types.IdleSetting {
	if f.after == "" && f.action == "" {
		return nil
	}
	return &types.IdleSetting{After: f.after, Action: f.action}
}

func (a *app) idleCommand() *cobra.Command {
	var f idleFlags
	cmd := &cobra.Command{
		Use:   "idle NAME [--after D] [--action stop|hibernate|hibernate-memory]",
		Short: "Set when a project's instances stop for lack of activity",
		Long:  "Set a project's idle stop; without flags it returns to the node's default.\n\n" + idleHelp,
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(a, cmd, func(ctx context.Context, c *client.Client) (types.Project, error) {
				return c.SetProjectIdle(ctx, args[0], types.IdleSetting{After: f.after, Action: f.action})
			}, projectDetail)
		},
	}
	cmd.Flags().StringVar(&f.after, "after", "", "stop instances after this long without activity, e.g. 30m; 0 = never")
	cmd.Flags().StringVar(&f.action, "action", "", "stop, hibernate or hibernate-memory (default: the node's, stop)")
	return cmd
}

func idleText(p *types.IdleSetting) string {
	if p == nil {
		return "the node's default"
	}
	after, action := p.After, p.Action
	switch after {
	case "":
		after = "the node's default"
	case "0":
		return "never"
	}
	if action == "" {
		action = "the node's default action"
	}
	return fmt.Sprintf("after %s, %s", after, action)
}

// instanceIdleRows tells how long the instance has been idle and when its
// idle action runs.
func instanceIdleRows(w io.Writer, i types.Instance) {
	switch {
	case i.ActiveSessions > 0:
		row(w, "IDLE:", fmt.Sprintf("no: %d session(s) open", i.ActiveSessions))
	case i.IdleSince != nil:
		row(w, "IDLE:", fmt.Sprintf("%s (since %s)", time.Since(*i.IdleSince).Round(time.Second), formatTime(*i.IdleSince)))
	}
	if i.IdleAfter == "" {
		row(w, "IDLE ACTION:", "none (no idle setting)")
		return
	}
	at := "when running and idle"
	if i.IdleActionAt != nil {
		at = fmt.Sprintf("at %s (in %s)", formatTime(*i.IdleActionAt), max(0, time.Until(*i.IdleActionAt)).Round(time.Second))
	}
	row(w, "IDLE ACTION:", fmt.Sprintf("%s after %s idle, %s", i.IdleAction, i.IdleAfter, at))
}
