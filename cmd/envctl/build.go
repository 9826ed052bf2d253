package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

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
		buildArgs  []string
		target     string
		devcont    string
	)
	cmd := &cobra.Command{
		Use:   "build PROJECT (-f SPEC | -f Dockerfile [--build-arg K=V]... [--target T] [CONTEXT_DIR] | --devcontainer DIR | -f devcontainer.json | --apt PKG... | --apk PKG...) [--validate CMD]... [--from N] [--switch]",
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

-f Dockerfile (a file named Dockerfile, Dockerfile.*, *.Dockerfile or
Containerfile) builds it with the node's BuildKit instead: multi-stage,
RUN --mount=type=cache, --build-arg and --target as Docker takes them, the
context CONTEXT_DIR (or --context; default none). FROM names an image
imported on the node ("envctl image import") or an earlier stage; RUN steps
have no network. BuildKit's cache on the node serves unchanged steps (the
log shows them CACHED); the image's layers are pushed as eStargz.
--devcontainer DIR (a directory with .devcontainer/devcontainer.json,
.devcontainer.json or devcontainer.json) or -f devcontainer.json builds a
devcontainer.json (comments allowed) through the same BuildKit path: its
image or build.dockerfile, its features (fetched here from their registry:
the node reaches none outside its own), containerEnv and remoteEnv (the
image's environment), remoteUser/containerUser, onCreateCommand,
updateContentCommand and postCreateCommand (run in the build), and
postStartCommand and postAttachCommand (run at each start of an instance).
Before the build its mounts (type=volume) are added as project volumes and
its forwardPorts/portsAttributes become the project's forwarded ports.
Every other property is refused by name. "envctl spec export P N --format
devcontainer" writes one; its customizations.envd.spec (packages) is built
on the image in a second build, which envctl starts when the first ends
(--no-wait applies to the second).
The output of every step is shown as it comes and kept: "envctl op logs ID".
--validate takes a command split into words as a POSIX shell would (quotes
group, nothing is expanded); --validate-sh SCRIPT runs "sh -c SCRIPT".

Exit codes: 0 built (and current with --switch); 1 failed; 3 built but NOT
current (--switch lost to another change of current).`,
		Args: rangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runOperation(a, cmd, "build", func(ctx context.Context, c *client.Client) (types.Operation, error) {
				if devcont == "" && isDevcontainer(file) {
					devcont, file = file, ""
				}
				if devcont != "" {
					if file != "" || len(apt)+len(apk) > 0 || len(args) == 2 || len(buildArgs) > 0 || target != "" || contextDir != "" {
						return types.Operation{}, usageError{fmt.Errorf("--devcontainer takes none of -f, --apt/--apk, CONTEXT_DIR, --context, --build-arg and --target (devcontainer.json has its build)")}
					}
					spec, err := devcontainerBuild(ctx, c, a.stderr, args[0], devcont, &req)
					if err != nil {
						return types.Operation{}, err
					}
					cmds, err := validate.commands()
					if err != nil {
						return types.Operation{}, err
					}
					if spec == nil {
						req.Validate = append(req.Validate, cmds...)
						return c.Build(ctx, args[0], req, client.WithIdempotencyKey(key))
					}
					// Two builds: the image (BuildKit), then envd's spec on
					// it in a build container; the second is the one
					// validated, switched and reported.
					first := req
					first.Switch = false
					op, err := c.Build(ctx, args[0], first, client.WithIdempotencyKey(key))
					if err != nil {
						return types.Operation{}, err
					}
					if op, err = a.follow(ctx, c, "build", op); err != nil {
						return types.Operation{}, err
					}
					if op.State != types.OpSucceeded {
						return types.Operation{}, opFailure("build (the devcontainer's image)", op)
					}
					var res types.BuildResult
					if err := json.Unmarshal(op.Result, &res); err != nil {
						return types.Operation{}, fmt.Errorf("build operation %s: decode result: %w", op.ID, err)
					}
					fmt.Fprintf(a.stderr, "devcontainer: image built as version %d; customizations.envd.spec builds on it\n", res.Version)
					spec.From, spec.Switch = res.Version, req.Switch
					spec.Validate = append(spec.Validate, req.Validate...)
					spec.Validate = append(spec.Validate, cmds...)
					k := key
					if k != "" {
						k += "-spec"
					}
					return c.Build(ctx, args[0], *spec, client.WithIdempotencyKey(k))
				}
				if isDockerfile(file) {
					if len(apt)+len(apk) > 0 {
						return types.Operation{}, usageError{fmt.Errorf("-f Dockerfile and --apt/--apk: give one of them")}
					}
					if err := dockerfileRequest(&req, file, buildArgs, target); err != nil {
						return types.Operation{}, err
					}
					if len(args) == 2 {
						if contextDir != "" {
							return types.Operation{}, usageError{fmt.Errorf("CONTEXT_DIR and --context: give one")}
						}
						contextDir = args[1]
					}
					cmds, err := validate.commands()
					if err != nil {
						return types.Operation{}, err
					}
					req.Validate = append(req.Validate, cmds...)
				} else if len(args) == 2 || len(buildArgs) > 0 || target != "" {
					return types.Operation{}, usageError{fmt.Errorf("CONTEXT_DIR, --build-arg and --target go with -f Dockerfile")}
				} else if err := buildRequest(cmd, &req, file, apt, apk, validate); err != nil {
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
	f.StringArrayVar(&buildArgs, "build-arg", nil, "a Dockerfile build argument K=V (repeat)")
	f.StringVar(&target, "target", "", "the Dockerfile stage to build (default: the last)")
	f.StringVar(&devcont, "devcontainer", "", "build the devcontainer.json of DIR (or that file)")
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

// isDockerfile reports whether -f names a Dockerfile rather than a spec.
func isDockerfile(file string) bool {
	base := filepath.Base(file)
	lower := strings.ToLower(base)
	return file != "" && file != "-" && (lower == "dockerfile" || lower == "containerfile" ||
		strings.HasPrefix(lower, "dockerfile.") || strings.HasSuffix(lower, ".dockerfile"))
}

// dockerfileRequest fills req with the Dockerfile file and its arguments.
func dockerfileRequest(req *types.BuildRequest, file string, buildArgs []string, target string) error {
	content, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	d := &types.DockerfileBuild{Content: string(content), Target: target}
	for _, kv := range buildArgs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			// As docker build: a bare name takes the value from the environment.
			if v, ok = os.LookupEnv(k); !ok {
				continue
			}
		}
		if d.Args == nil {
			d.Args = map[string]string{}
		}
		d.Args[k] = v
	}
	req.Dockerfile = d
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
(a Dockerfile or devcontainer.json build, its final stage FROM the new base;
or envd's spec of a version of kind build made on a base version) again on
the new base instead: no conflicts, a version of kind build, its log in "envctl op logs". --validate is split into words as a POSIX shell would;
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
