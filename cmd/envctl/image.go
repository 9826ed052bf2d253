package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"

	"github.com/envd-dev/envd/api/types"
	"github.com/spf13/cobra"

	"github.com/envd-dev/envd/client"
)

func (a *app) infoCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "info",
		Short: "Show the server, its registry and component versions",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(a, cmd, func(ctx context.Context, c *client.Client) (types.Info, error) {
				return c.Info(ctx)
			}, func(w io.Writer, info types.Info) {
				row(w, "SERVER:", a.c.BaseURL())
				row(w, "VERSION:", info.Version)
				row(w, "NODE:", info.Node)
				if info.DataDir != "" {
					row(w, "DATA DIR:", info.DataDir)
				}
				row(w, "REGISTRY:", info.Registry)
				for _, k := range sortedKeys(info.Components) {
					row(w, strings.ToUpper(k)+":", info.Components[k])
				}
				if info.SSH != nil {
					row(w, "SSH:", info.SSH.Addr+" (host key "+info.SSH.HostKeyFingerprint+")")
				}
			})
		},
	}
}

func (a *app) imageCommand() *cobra.Command {
	var fromRef bool
	importCmd := &cobra.Command{
		Use:   "import SOURCE NAME",
		Short: "Import a base image: a root filesystem (directory or tar), an OCI image layout, a docker save tar, or a registry reference",
		Long: `Import a base image from SOURCE:

  - a root filesystem directory, or a tar of one (plain or gzip): imported as
    one eStargz layer;
  - an OCI image layout (a directory with oci-layout and index.json, or a tar
    of one, such as "envctl version export" writes) or a "docker save" tar:
    imported with its layers as they are (eStargz layers stay lazy);
  - with --ref, SOURCE is an image reference in any OCI registry the server
    reaches (REGISTRY/REPO:TAG or @DIGEST), which the server pulls.

A directory is streamed as a tar made by GNU tar with numeric owners, extended
attributes and ACLs (run as root to read every file); a file is sent as it
is. The server tells the kinds apart by the files in the tar.`,
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			src, name := args[0], args[1]
			return call(a, cmd, func(ctx context.Context, c *client.Client) (types.Image, error) {
				if fromRef {
					img, err := c.PullImage(ctx, name, src)
					if err != nil {
						return img, fmt.Errorf("import %s: %w", src, err)
					}
					return img, nil
				}
				st, err := os.Stat(src)
				if err != nil {
					return types.Image{}, err
				}
				var body io.ReadCloser
				if st.IsDir() {
					body, err = tarDir(ctx, src)
				} else {
					body, err = os.Open(src)
				}
				if err != nil {
					return types.Image{}, err
				}
				defer body.Close()
				var total int64 // a directory's tar has no size before it is made
				if !st.IsDir() {
					total = st.Size()
				}
				r, finish := a.newProgress().upload(body, src, total)
				img, err := c.ImportImage(ctx, name, r)
				finish()
				if err != nil {
					return img, fmt.Errorf("import %s: %w", src, err)
				}
				return img, nil
			}, one(imageTable))
		},
	}
	lsCmd := &cobra.Command{
		Use:   "ls",
		Short: "List imported base images",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(a, cmd, func(ctx context.Context, c *client.Client) ([]types.Image, error) {
				return c.ListImages(ctx)
			}, all(imageTable))
		},
	}
	importCmd.Flags().BoolVar(&fromRef, "ref", false, "SOURCE is a reference in an OCI registry that the server pulls")
	return group("image", "Manage base images", importCmd, lsCmd)
}

// tarDir streams dir as a tar made by GNU tar. If tar fails, the stream
// ends with an error instead of EOF, so the upload fails rather than import
// a partial tree.
func tarDir(ctx context.Context, dir string) (io.ReadCloser, error) {
	return runTar(ctx, dir, "--numeric-owner", "--xattrs", "--acls", "-C", dir, "-cf", "-", ".")
}

// runTar streams what tar with args writes to its stdout, as tarDir
// (dir names the tree in errors).
func runTar(ctx context.Context, dir string, args ...string) (io.ReadCloser, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, "tar", args...)
	cmd.Stdout = pw
	t := &tarStream{pr: pr, cmd: cmd, dir: dir}
	cmd.Stderr = &t.stderr
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		return nil, fmt.Errorf("run tar: %w", err)
	}
	pw.Close()
	return t, nil
}

type tarStream struct {
	pr     *os.File
	cmd    *exec.Cmd
	dir    string
	stderr bytes.Buffer
	waited bool
	err    error
}

func (t *tarStream) Read(p []byte) (int, error) {
	n, err := t.pr.Read(p)
	if err == io.EOF {
		if werr := t.wait(); werr != nil {
			return n, werr
		}
	}
	return n, err
}

func (t *tarStream) wait() error {
	if !t.waited {
		t.waited = true
		if err := t.cmd.Wait(); err != nil {
			t.err = fmt.Errorf("tar %s: %v: %s", t.dir, err, strings.TrimSpace(t.stderr.String()))
		}
	}
	return t.err
}

// Close stops reading; tar, if still running, ends on a broken pipe.
func (t *tarStream) Close() error {
	err := t.pr.Close()
	_ = t.wait()
	return err
}
