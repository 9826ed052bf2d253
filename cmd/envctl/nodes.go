package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/client"
)

// nodesCommand is envctl nodes: the cluster's members (admin).
func (a *app) nodesCommand() *cobra.Command {
	verb := func(name, short string, do func(*client.Client, context.Context, string) (types.Node, error)) *cobra.Command {
		return &cobra.Command{
			Use: name + " NODE", Short: short, Args: exactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				return call(a, cmd, func(ctx context.Context, c *client.Client) (types.Node, error) { return do(c, ctx, args[0]) }, nodeDetail)
			},
		}
	}
	ls := &cobra.Command{
		Use: "ls", Short: "List the cluster's nodes: state, labels, capacity, instances, lease", Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(a, cmd, func(ctx context.Context, c *client.Client) ([]types.Node, error) { return c.ListNodes(ctx) }, all(nodeTable))
		},
	}
	join := &cobra.Command{
		Use:   "join-command",
		Short: "Print the envd serve line another machine runs to join this cluster",
		Long: `Print the envd serve line another machine runs to join this cluster: the
database DSN, the registry (or the registry's S3 bucket) and the S3 settings of
volume archives. It holds credentials (the DSN's password, S3 keys): only an
admin token gets it; treat the output as a secret.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(a, cmd, func(ctx context.Context, c *client.Client) (types.JoinCommand, error) { return c.JoinCommand(ctx) }, joinDetail)
		},
	}
	var ttl string
	token := &cobra.Command{
		Use:   "join-token [--ttl D]",
		Short: "Make a join token and print the short join line: envd serve --join URL --token T",
		Long: `Make a join token (admin) and print the line a new machine runs to join this
cluster: envd serve --join URL --token T. The new node fetches the database, registry
and S3 settings with the token; the token is used once and expires after --ttl (1m to
168h, default 1h). Treat it as a secret: it gives the cluster's credentials.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(a, cmd, func(ctx context.Context, c *client.Client) (types.JoinToken, error) {
				return c.CreateJoinToken(ctx, types.JoinTokenRequest{TTL: ttl})
			}, joinTokenDetail)
		},
	}
	token.Flags().StringVar(&ttl, "ttl", "", "how long the token may be used (default 1h)")
	return group("nodes", "The cluster's nodes (admin): list, show, cordon, uncordon, drain, join-command, join-token",
		ls,
		verb("show", "Show one node", (*client.Client).GetNode),
		verb("cordon", "Stop placing new instances on a node; what runs there stays", (*client.Client).CordonNode),
		verb("uncordon", "Make a cordoned, draining or drained node take instances again", (*client.Client).UncordonNode),
		verb("drain", "Stop placements and hibernate a node's instances (then it shows drained)", (*client.Client).DrainNode),
		join, token)
}

func nodeTable(w io.Writer, ns ...types.Node) {
	row(w, "NAME", "STATE", "INSTANCES", "CPUS", "MEMORY", "LEASE EXPIRES", "LABELS", "API")
	for _, n := range ns {
		state := n.State
		if n.Expired {
			state += " (lease expired)"
		} else if n.Stopped {
			state += " (stopped)"
		}
		row(w, n.Name, state, n.Instances, fmt.Sprintf("%g/%g", n.Used.CPUs, n.Capacity.CPUs),
			fmt.Sprintf("%s/%s", formatBytes(n.Used.MemoryBytes), formatBytes(n.Capacity.MemoryBytes)),
			formatTime(n.LeaseExpiresAt), orDash(labelsText(n.Labels)), n.APIURL)
	}
}

func nodeDetail(w io.Writer, n types.Node) {
	row(w, "NAME:", n.Name)
	row(w, "STATE:", n.State)
	row(w, "API:", n.APIURL)
	row(w, "LABELS:", orDash(labelsText(n.Labels)))
	row(w, "INSTANCES:", n.Instances)
	slots := "no bound"
	if n.Capacity.InstanceSlots > 0 {
		slots = fmt.Sprint(n.Capacity.InstanceSlots)
	}
	row(w, "SLOTS:", slots)
	row(w, "CPUS:", fmt.Sprintf("%g used of %g", n.Used.CPUs, n.Capacity.CPUs))
	row(w, "MEMORY:", fmt.Sprintf("%s used of %s", formatBytes(n.Used.MemoryBytes), formatBytes(n.Capacity.MemoryBytes)))
	row(w, "DISK:", fmt.Sprintf("%s used of %s", formatBytes(n.Used.DiskBytes), formatBytes(n.Capacity.DiskBytes)))
	lease := fmt.Sprintf("%s, expires %s", time.Duration(n.LeaseSeconds*float64(time.Second)), formatTime(n.LeaseExpiresAt))
	if n.Expired {
		lease += " (expired: about to be marked lost)"
	}
	row(w, "LEASE:", lease)
	row(w, "RENEWED:", formatTime(n.RenewedAt))
	row(w, "STARTED:", formatTime(n.StartedAt))
	row(w, "STATE SINCE:", formatTime(n.StateChangedAt))
	if n.Stopped {
		row(w, "STOPPED:", "shut down gracefully; no placements until it starts again")
	}
	row(w, "VERSION:", orDash(n.Version))
}

func joinDetail(w io.Writer, j types.JoinCommand) {
	fmt.Fprintln(w, j.Command)
	if len(j.Secrets) > 0 {
		fmt.Fprintf(w, "# secret: this line holds credentials (%s); only admins see it\n", strings.Join(j.Secrets, ", "))
	}
	for _, n := range j.Notes {
		fmt.Fprintln(w, "# "+n)
	}
}

func joinTokenDetail(w io.Writer, j types.JoinToken) {
	fmt.Fprintln(w, j.Command)
	fmt.Fprintf(w, "# secret: the token gives the cluster's credentials; used once, expires %s\n", formatTime(j.ExpiresAt))
	fmt.Fprintln(w, "# replace NAME with the new node's name and the listen address with one the other nodes reach; add --label KEY=VALUE for node_selector")
}

func labelsText(m map[string]string) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, k+"="+m[k])
	}
	return strings.Join(out, ",")
}

// checkpointEveryCommand is envctl project checkpoint-every NAME [D].
func (a *app) checkpointEveryCommand() *cobra.Command {
	var every string
	cmd := &cobra.Command{
		Use:   "checkpoint-every NAME [--every D]",
		Short: "Show or set how often a project's retained instances are checkpointed",
		Long: `Show or set how often the project's running retained instances are saved as
versions that do not become current (checkpoints), so that a retained instance
on a node that is lost loses at most that much work: envctl show of the failed
instance names the checkpoint, and envctl up NAME --version N starts from it.
Each checkpoint is a version (retention and max_versions apply). --every 0 = never.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(a, cmd, func(ctx context.Context, c *client.Client) (types.CheckpointSetting, error) {
				if cmd.Flags().Changed("every") {
					return c.SetProjectCheckpoint(ctx, args[0], types.CheckpointSetting{Every: every})
				}
				return c.GetProjectCheckpoint(ctx, args[0])
			}, func(w io.Writer, s types.CheckpointSetting) {
				if s.Every == "0" {
					row(w, "CHECKPOINT:", "never")
					return
				}
				row(w, "CHECKPOINT:", "every "+s.Every)
			})
		},
	}
	cmd.Flags().StringVar(&every, "every", "", "checkpoint interval, e.g. 15m (at least 10s); 0 = never")
	return cmd
}
