package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/client"
)

func (a *app) specCommand() *cobra.Command {
	var (
		file   string
		format string
	)
	export := &cobra.Command{
		Use:   "export PROJECT [N]",
		Short: "Write a build spec that makes version N (default: current) again",
		Long: `Write a build spec that makes version N (default: the current one) again on
the base it sits on, for "envctl build -f". A version of kind build answers
the spec it was built from. Any other version answers a spec derived from
what it changed against its base: the packages it added or upgraded, with
their versions; the apt or apk sources and keys it changed (written before the
install); the other files it changed under /etc, inline up to 64 KiB (written
after the install); removed packages and deleted /etc files as run steps. What
the spec leaves out is listed first, as comments (a YAML spec), or on stderr.

The spec is YAML, or JSON with --format json; -o json or -o yaml prints the
whole answer (project, base, omitted, spec) instead.

--format devcontainer writes a devcontainer.json into the directory -f
(default .devcontainer): "image" (the imported image the version sits on)
and the spec under customizations.envd.spec, which "envctl build P
--devcontainer DIR" builds on the image in a build container (with the
package sources' network); a version built from a Dockerfile writes that
Dockerfile beside it instead.`,
		Args: rangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			n := 0
			if len(args) == 2 {
				if n, err = versionArg(args[1]); err != nil {
					return err
				}
			} else {
				proj, err := c.GetProject(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				n = proj.Current
			}
			if format != "yaml" && format != "json" && format != "devcontainer" {
				return usageError{fmt.Errorf("--format %q: yaml, json or devcontainer", format)}
			}
			vs, err := c.VersionSpec(cmd.Context(), args[0], n)
			if err != nil {
				return err
			}
			if format == "devcontainer" && a.output != outJSON && a.output != outYAML {
				return a.exportDevcontainer(cmd.Context(), c, vs, file)
			}
			if a.output == outJSON || a.output == outYAML {
				return a.emit(vs, nil)
			}
			var buf bytes.Buffer
			if err := writeSpec(&buf, vs, format); err != nil {
				return err
			}
			if file == "" || file == "-" {
				_, err = a.stdout.Write(buf.Bytes())
				return err
			}
			return os.WriteFile(file, buf.Bytes(), 0o644)
		},
	}
	export.Flags().StringVarP(&file, "file", "f", "", "write the spec to FILE instead of stdout (--format devcontainer: the directory, default .devcontainer)")
	export.Flags().StringVar(&format, "format", "yaml", "yaml, json or devcontainer")
	return group("spec", "Export versions as build specs", export)
}

// writeSpec writes vs's spec as a document envctl build -f takes, with
// what it leaves out as comments (YAML) or on stderr (JSON).
func writeSpec(w io.Writer, vs types.VersionSpec, format string) error {
	head := fmt.Sprintf("version %d of %s (%s) on %s", vs.Version, vs.Project, vs.Kind, vs.Base)
	if vs.Declared {
		head += ": the spec it was built from"
	} else {
		head += ": derived from what it changed"
	}
	if format == "json" {
		fmt.Fprintln(os.Stderr, head)
		for _, o := range vs.Omitted {
			fmt.Fprintf(os.Stderr, "not in the spec: %s: %s\n", o.Path, o.Reason)
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(vs.Spec)
	}
	fmt.Fprintf(w, "# %s\n", head)
	for _, o := range vs.Omitted {
		fmt.Fprintf(w, "# not in the spec: %s: %s\n", o.Path, strings.ReplaceAll(o.Reason, "\n", " "))
	}
	return writeYAML(w, vs.Spec)
}

// readSpec reads a build spec, YAML or JSON (JSON is YAML), with the JSON
// field names; an unknown field is an error.
func readSpec(r io.Reader, req *types.BuildRequest) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return err
	}
	if doc == nil {
		return fmt.Errorf("the spec is empty")
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return fmt.Errorf("not a JSON-like document (a map key that is not a string?): %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(req); err != nil {
		return fmt.Errorf("%w (a mode is a string: \"0644\")", err)
	}
	return nil
}

// uploadContext tars dir and uploads it as a build context of project.
func uploadContext(ctx context.Context, c *client.Client, project, dir string) (string, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return "", err
	}
	if !st.IsDir() {
		return "", usageError{fmt.Errorf("--context %s: not a directory", dir)}
	}
	tr, err := tarDir(ctx, dir)
	if err != nil {
		return "", err
	}
	defer tr.Close()
	bc, err := c.UploadBuildContext(ctx, project, tr)
	if err != nil {
		return "", err
	}
	return bc.Context, nil
}

// opLogsCommand is "envctl op logs ID".
func (a *app) opLogsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "logs ID",
		Short: "Print an operation's log (a build's output)",
		Long: `Print the log of a build (or of a migration that rebuilt a spec): every
step's command line and output. While the operation runs it prints the lines
so far; afterwards the log kept in object storage. "envctl op watch ID"
shows the lines as they come.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			_, err = c.OperationLogs(cmd.Context(), args[0], a.stdout)
			return err
		},
	}
}
