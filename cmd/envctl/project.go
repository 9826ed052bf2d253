package main

import (
	"context"
	"fmt"
	"io"
	"sort"

	"github.com/envd-dev/envd/api/types"

	"github.com/spf13/cobra"

	"github.com/envd-dev/envd/client"
)

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func (a *app) projectCommand() *cobra.Command {
	var (
		req types.CreateProjectRequest
		key string
		lf  limitFlags
		idf idleFlags
	)
	create := &cobra.Command{
		Use:   "create NAME --base IMAGE",
		Short: "Create a project on a base image",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(a, cmd, func(ctx context.Context, c *client.Client) (types.Project, error) {
				req.Name = args[0]
				req.Idle = idf.setting()
				if l, set, err := lf.limits(cmd.Flags()); err != nil {
					return types.Project{}, err
				} else if set {
					req.Limits = &l
				}
				return c.CreateProject(ctx, req, client.WithIdempotencyKey(key))
			}, one(projectTable))
		},
	}
	create.Flags().StringVar(&req.Base, "base", "", "base image: an imported image name or repo@digest (required)")
	create.Flags().StringArrayVar(&req.Excludes, "exclude", nil, "path never saved in versions (repeatable)")
	create.Flags().StringVar(&req.Compression, "compression", "", "layer compression: estargz (default), zstd or gzip")
	create.Flags().StringArrayVar(&req.Volumes, "volume", nil, "persistent volume NAME:PATH[:UID:GID][:SIZE], e.g. work:/workspace (repeatable)")
	create.Flags().StringVar(&key, "idempotency-key", "", "retrying with the same key and flags returns the same project")
	lf.add(create.Flags())
	create.Flags().StringVar(&req.Egress, "egress", "", "where instances may connect: open (default; the internet, private ranges dropped), none, or allow:CIDR|HOST,...")
	create.Flags().BoolVar(&req.IsolateInstances, "isolate-instances", false, "the project's instances cannot connect to each other either")
	idf.add(create.Flags())
	create.Flags().StringVar(&req.RuntimeClass, "runtime-class", "", "runtime class of its instances: runc or gvisor (default: each node's --runtime-class)")
	create.Flags().BoolVar(&req.Docker, "docker", false, "its instances may run dockerd and nested containers (needs --runtime-class gvisor)")
	_ = create.MarkFlagRequired("base")

	ls := &cobra.Command{
		Use:   "ls",
		Short: "List projects",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(a, cmd, func(ctx context.Context, c *client.Client) ([]types.Project, error) {
				return c.ListProjects(ctx)
			}, all(projectTable))
		},
	}
	show := &cobra.Command{
		Use:   "show NAME",
		Short: "Show a project",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(a, cmd, func(ctx context.Context, c *client.Client) (types.Project, error) {
				return c.GetProject(ctx, args[0])
			}, projectDetail)
		},
	}
	rm := &cobra.Command{
		Use:   "rm NAME",
		Short: "Delete a project",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(a, cmd, func(ctx context.Context, c *client.Client) (map[string]any, error) {
				return map[string]any{"name": args[0], "deleted": true}, c.DeleteProject(ctx, args[0])
			}, func(w io.Writer, _ map[string]any) { row(w, "deleted project "+args[0]) })
		},
	}
	return group("project", "Manage projects", create, ls, show, rm, a.projectSetCommand(), a.retentionCommand(), a.limitsCommand(), a.networkCommand(), a.idleCommand(), a.projectValidationCommand(), a.poolCommand(), a.checkpointEveryCommand())
}

func (a *app) retentionCommand() *cobra.Command {
	var r types.Retention
	cmd := &cobra.Command{
		Use:   "retention NAME [--keep-last N] [--keep-newer-than D]",
		Short: "Set which versions a GC keeps",
		Long: `Set a project's version retention policy. A GC ("envctl gc", admin) deletes
the versions the policy does not keep: it keeps the newest --keep-last N and
those newer than --keep-newer-than D (a Go duration such as 720h). The
current version, pinned versions and versions an instance uses are always
kept. Without either flag every version is kept.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(a, cmd, func(ctx context.Context, c *client.Client) (types.Project, error) {
				return c.SetRetention(ctx, args[0], r)
			}, projectDetail)
		},
	}
	cmd.Flags().IntVar(&r.KeepLast, "keep-last", 0, "keep the newest N versions (0: no count limit)")
	cmd.Flags().StringVar(&r.KeepNewerThan, "keep-newer-than", "", "keep versions newer than this duration")
	return cmd
}

// projectSetCommand is `envctl project set NAME [--runtime-class C]
// [--docker=BOOL]`.
func (a *app) projectSetCommand() *cobra.Command {
	var class string
	var docker bool
	cmd := &cobra.Command{
		Use:   "set NAME [--runtime-class runc|gvisor|default] [--docker=true|false]",
		Short: "Set a project's runtime class and whether it runs Docker inside",
		Long: `Set the runtime class of a project's instances: runc (the node's kernel,
behind seccomp and namespaces) or gvisor (a kernel of its own, gVisor's);
"default" is each node's --runtime-class. Instances made afterwards run on
it, on any node (pools, builds and restores included); those already made
keep theirs. A class the tenant may not use (envctl admin quota
--runtime-classes) is refused (permission_denied, 403); a node that cannot
run the class refuses to start instances on it (failed_precondition, 409).

--docker lets instances made afterwards run dockerd and nested containers
inside their gVisor sandbox (docs/api.md "Docker inside an instance"). It
needs runtime class gvisor: on any other class it is refused
(failed_precondition, 409), and so is moving a docker project off gvisor.
Given both, the class is set first when Docker goes on and last when it
goes off.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			setClass, setDocker := cmd.Flags().Changed("runtime-class"), cmd.Flags().Changed("docker")
			if !setClass && !setDocker {
				return usageError{fmt.Errorf("nothing to set: give --runtime-class or --docker")}
			}
			c := class
			if c == "default" {
				c = ""
			}
			return call(a, cmd, func(ctx context.Context, cl *client.Client) (types.Project, error) {
				var p types.Project
				var err error
				if setDocker && !docker {
					if p, err = cl.SetProjectDocker(ctx, args[0], false); err != nil {
						return p, err
					}
				}
				if setClass {
					if p, err = cl.SetProjectRuntimeClass(ctx, args[0], c); err != nil {
						return p, err
					}
				}
				if setDocker && docker {
					p, err = cl.SetProjectDocker(ctx, args[0], true)
				}
				return p, err
			}, projectDetail)
		},
	}
	cmd.Flags().StringVar(&class, "runtime-class", "", "runc, gvisor, or default (each node's)")
	cmd.Flags().BoolVar(&docker, "docker", false, "instances may run dockerd (runtime class gvisor only)")
	return cmd
}
