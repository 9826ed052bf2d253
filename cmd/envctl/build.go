package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/envd-dev/envd/api/types"

	"github.com/spf13/cobra"

	"github.com/envd-dev/envd/client"
)

func (a *app) buildCommand() *cobra.Command {
	var (
		req        types.BuildRequest
		file       string
		apt, apk   []string
		validate   validateFlags
		noWait     bool
		key        string
		contextDir string
	)
	cmd := &cobra.Command{
		Use:   "build PROJECT (-f SPEC | --apt PKG... | --apk PKG...) [--validate CMD]... [--from N] [--switch]",
		Short: "Install packages on a version in a build container and save them as a new version",
		Long: `Build a version of kind build: the packages are installed on version --from
(default: the project's first, its base) in an isolated build container, the
change is saved, the --validate commands run in a trial instance of it (each
must exit 0, else the version is marked failed), and with --switch it becomes
current if current did not move meanwhile. The same base and spec reuse an
earlier build.

-f SPEC reads the spec as YAML or JSON ("-" for stdin; docs/api.md, "Build
specs"); "envctl spec export" writes one:
  manager: apt
  packages: [graphviz, jq=1.6-2.1]
  sources: {apt: [{name: extra.list, content: "deb ..."}]}
  files: [{path: /etc/motd, content: "hello\n", mode: "0644"}]
  env: {LANG: C.UTF-8}
  run: [{args: [make, install], dir: /src}, {args: ["echo $HOME"], shell: true}]
  validate: [[dot, -V]]
--context DIR uploads DIR (as a tar) for files that name a source in it.
The output of every step is shown as it comes and kept: "envctl op logs ID".
--validate takes a command split into words as a POSIX shell would (quotes
group, nothing is expanded); --validate-sh SCRIPT runs "sh -c SCRIPT".

Exit codes: 0 built (and current with --switch); 1 failed; 3 built but NOT
current (--switch lost to another change of current).`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runOperation(a, cmd, "build", func(ctx context.Context, c *client.Client) (types.Operation, error) {
				if err := buildRequest(cmd, &req, file, apt, apk, validate); err != nil {
					return types.Operation{}, err
				}
				if contextDir != "" {
					d, err := uploadContext(ctx, c, args[0], contextDir)
					if err != nil {
						return types.Operation{}, err
					}
					req.Context = d
				}
				return c.Build(ctx, args[0], req, client.WithIdempotencyKey(key))
			}, noWait, buildRows, func(r types.BuildResult) bool { return r.Conflict })
		},
	}
	f := cmd.Flags()
	f.StringVarP(&file, "file", "f", "", "the build spec, YAML or JSON (- for stdin)")
	f.StringVar(&contextDir, "context", "", "a directory uploaded as the build context (files[].source names its files)")
	f.StringArrayVar(&apt, "apt", nil, "a Debian package, name or name=version (repeat)")
	f.StringArrayVar(&apk, "apk", nil, "an Alpine package, name or name=version (repeat)")
	validate.add(f)
	f.IntVar(&req.From, "from", 0, "version to build on (default: the project's first)")
	f.BoolVar(&req.Switch, "switch", false, "make the new version current")
	f.BoolVar(&noWait, "no-wait", false, "print the operation and do not wait")
	f.StringVar(&key, "idempotency-key", "", "retrying with the same key returns the same operation")
	return cmd
}

// buildRequest fills req from -f or from the package flags (not both).
func buildRequest(cmd *cobra.Command, req *types.BuildRequest, file string, apt, apk []string, validate validateFlags) error {
	if file != "" {
		if len(apt)+len(apk) > 0 {
			return usageError{fmt.Errorf("-f and --apt/--apk: give one of them")}
		}
		var r io.Reader = cmd.InOrStdin()
		if file != "-" {
			f, err := os.Open(file)
			if err != nil {
				return err
			}
			defer f.Close()
			r = f
		}
		from, sw := req.From, req.Switch
		if err := readSpec(r, req); err != nil {
			return usageError{fmt.Errorf("build spec %s: %w", file, err)}
		}
		if cmd.Flags().Changed("from") {
			req.From = from
		}
		req.Switch = req.Switch || sw
	} else {
		switch {
		case len(apt) > 0 && len(apk) > 0:
			return usageError{fmt.Errorf("--apt and --apk: one package manager per build")}
		case len(apt) > 0:
			req.Manager, req.Packages = "apt", apt
		case len(apk) > 0:
			req.Manager, req.Packages = "apk", apk
		default:
			return usageError{fmt.Errorf("no packages: give -f SPEC, --apt PKG or --apk PKG")}
		}
	}
	cmds, err := validate.commands()
	if err != nil {
		return err
	}
	req.Validate = append(req.Validate, cmds...)
	return nil
}

func buildRows(w io.Writer, r types.BuildResult) {
	row(w, "PROJECT:", r.Project)
	row(w, "VERSION:", r.Version)
	row(w, "FROM:", r.From)
	row(w, "CACHED:", r.Cached)
	row(w, "VALIDATED:", r.Validated)
	row(w, "CURRENT:", r.Current)
	if r.Conflict {
		row(w, "CONFLICT:", "current moved during the build; the version is kept, not current")
	}
	row(w, "KEY:", r.Key)
}

func (a *app) migrateCommand() *cobra.Command {
	var (
		req      types.MigrateRequest
		validate validateFlags
		noWait   bool
		key      string
	)
	cmd := &cobra.Command{
		Use:   "migrate PROJECT --base IMAGE [--validate CMD]... [--switch]",
		Short: "Move the current version onto a new base image, keeping the old one",
		Long: `Migrate a project to a new base image: the current version's own layers are
put on the new base as a new version of kind migration; paths that both the
base update and the project changed are listed as conflicts (the project's
file wins; a package database among them means the package manager sees the
project's package set); the --validate commands run in a trial instance (a
failure marks the version failed); the project's declared validation
("envctl project validation") runs first. With --switch it becomes current
if current did not move. The old version stays for rollback ("envctl
switch"). Migrating onto the base the current version already sits on is
refused at once. --mode rebuild builds the current version's declared spec
(a version of kind build made on a base version) again on the new base
instead: no conflicts, a version of kind build, its log in "envctl op logs". --validate is split into words as a POSIX shell would;
--validate-sh SCRIPT runs "sh -c SCRIPT". With -o json a failed migration
prints its operation, whose result has the failed version and conflicts.

Exit codes: 0 migrated (and current with --switch); 1 failed; 3 migrated but
NOT current (--switch lost to another change of current).`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runOperation(a, cmd, "migrate", func(ctx context.Context, c *client.Client) (types.Operation, error) {
				if req.Base == "" {
					return types.Operation{}, usageError{fmt.Errorf("--base is required")}
				}
				cmds, err := validate.commands()
				if err != nil {
					return types.Operation{}, err
				}
				req.Validate = cmds
				return c.Migrate(ctx, args[0], req, client.WithIdempotencyKey(key))
			}, noWait, migrateRows, func(r types.MigrateResult) bool { return r.Conflict })
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Base, "base", "", "the new base: an imported image name or repo@digest")
	f.StringVar(&req.Mode, "mode", "", "rebase (default: the version's layers on the new base) or rebuild (its declared build spec built again on it)")
	validate.add(f)
	f.BoolVar(&req.Switch, "switch", false, "make the new version current")
	f.BoolVar(&noWait, "no-wait", false, "print the operation and do not wait")
	f.StringVar(&key, "idempotency-key", "", "retrying with the same key returns the same operation")
	return cmd
}

func migrateRows(w io.Writer, r types.MigrateResult) {
	row(w, "PROJECT:", r.Project)
	row(w, "VERSION:", fmt.Sprintf("%d (from %d)", r.Version, r.From))
	row(w, "BASE:", r.OldBase+" -> "+r.NewBase)
	if r.Mode != "" {
		row(w, "MODE:", r.Mode)
	}
	row(w, "CURRENT:", r.Current)
	row(w, "VALIDATED:", r.Validated)
	row(w, "CONFLICTS:", len(r.Conflicts))
	if r.DatabaseConflict {
		row(w, "", "a package database is among them: the package manager sees the project's package set")
	}
	for _, c := range r.Conflicts {
		row(w, "", c)
	}
}
