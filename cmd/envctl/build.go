package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/envd"
)

func (a *app) buildCommand() *cobra.Command {
	var (
		req      envd.BuildRequest
		file     string
		apt, apk []string
		validate []string
		noWait   bool
		key      string
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

-f SPEC reads the request as JSON ("-" for stdin):
  {"manager": "apt", "packages": ["graphviz", "jq=1.6-2.1"],
   "validate": [["dot", "-V"]], "switch": true}
--validate takes a command split on spaces (no shell).

Exit codes: 0 built (and current with --switch); 1 failed; 3 built but NOT
current (--switch lost to another change of current).`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			if err := buildRequest(cmd, &req, file, apt, apk, validate); err != nil {
				return err
			}
			ctx := cmd.Context()
			op, err := c.Build(ctx, args[0], req, client.WithIdempotencyKey(key))
			if err != nil {
				return err
			}
			if noWait {
				return a.emit(op, func(w io.Writer) { operationDetail(w, op) })
			}
			if op, err = a.follow(ctx, c, "build", op); err != nil {
				return err
			}
			if op.State != envd.OpSucceeded {
				return &exitCodeError{code: exitError, err: opFailure("build", op)}
			}
			var res envd.BuildResult
			if err := json.Unmarshal(op.Result, &res); err != nil {
				return fmt.Errorf("build operation %s: decode result: %w", op.ID, err)
			}
			if err := a.emit(res, func(w io.Writer) { buildRows(w, res) }); err != nil {
				return err
			}
			if res.Conflict {
				return &exitCodeError{code: exitConflict}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&file, "file", "f", "", "the build request as JSON (- for stdin)")
	f.StringArrayVar(&apt, "apt", nil, "a Debian package, name or name=version (repeat)")
	f.StringArrayVar(&apk, "apk", nil, "an Alpine package, name or name=version (repeat)")
	f.StringArrayVar(&validate, "validate", nil, "a validation command, split on spaces (repeat)")
	f.IntVar(&req.From, "from", 0, "version to build on (default: the project's first)")
	f.BoolVar(&req.Switch, "switch", false, "make the new version current")
	f.BoolVar(&noWait, "no-wait", false, "print the operation and do not wait")
	f.StringVar(&key, "idempotency-key", "", "retrying with the same key returns the same operation")
	return cmd
}

// buildRequest fills req from -f or from the package flags (not both).
func buildRequest(cmd *cobra.Command, req *envd.BuildRequest, file string, apt, apk, validate []string) error {
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
		dec := json.NewDecoder(r)
		dec.DisallowUnknownFields()
		from, sw := req.From, req.Switch
		if err := dec.Decode(req); err != nil {
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
	for _, v := range validate {
		req.Validate = append(req.Validate, strings.Fields(v))
	}
	return nil
}

func buildRows(w io.Writer, r envd.BuildResult) {
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
