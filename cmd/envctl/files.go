package main

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/internal/tarfs"
)

// The file API from the command line: envctl cp and envctl ls
// INSTANCE:PATH (instance.go's ls hands an argument with a colon here).

// remotePath splits "INSTANCE:PATH"; ok is false for a local path (one
// whose part before the first colon has a "/", or without a colon).
func remotePath(arg string) (id, p string, ok bool) {
	id, p, found := strings.Cut(arg, ":")
	if !found || id == "" || strings.Contains(id, "/") {
		return "", "", false
	}
	if p == "" {
		p = "/"
	}
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	return id, p, true
}

func fileOpts(user string) []client.FileOption {
	if user == "" {
		return nil
	}
	return []client.FileOption{client.AsUser(user)}
}

// lsFiles lists INSTANCE:PATH.
func (a *app) lsFiles(cmd *cobra.Command, arg, user string) error {
	id, p, _ := remotePath(arg)
	c, err := a.client()
	if err != nil {
		return err
	}
	l, err := c.ListFiles(cmd.Context(), id, p, fileOpts(user)...)
	if err != nil {
		return err
	}
	if a.output == outName {
		for _, e := range l.Entries {
			fmt.Fprintln(a.stdout, e.Name)
		}
		return nil
	}
	return a.emit(l, func(w io.Writer) {
		row(w, "MODE", "UID", "GID", "SIZE", "MODIFIED", "NAME")
		for _, e := range l.Entries {
			name := e.Name
			if e.Type == types.FileTypeDir {
				name += "/"
			}
			if e.LinkTarget != "" {
				name += " -> " + e.LinkTarget
			}
			row(w, typeLetter(e.Type)+e.Mode, e.UID, e.GID, e.Size, formatTime(e.ModTime), name)
		}
	})
}

func typeLetter(t string) string {
	switch t {
	case types.FileTypeDir:
		return "d"
	case types.FileTypeSymlink:
		return "l"
	case types.FileTypeFile:
		return "-"
	}
	return t[:1]
}

func (a *app) cpCommand() *cobra.Command {
	var user string
	cmd := &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy files and directories to or from an instance",
		Long: `Copy files and directories between this machine and an instance, like docker cp.
One of SRC and DST is INSTANCE:PATH (PATH absolute in the instance), the other a local
path; "-" as the local DST writes a file to stdout.

  envctl cp ./src INSTANCE:/work      upload (into /work/src when /work is a directory)
  envctl cp INSTANCE:/etc/hosts .     download (into ./hosts)

Directories travel as a tar stream (the archive routes): symlinks stay symlinks, device
nodes are left out, and what is written in the instance belongs to --user (default: the
image's user). Files are written atomically with their permission bits.`,
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			srcID, src, srcRemote := remotePath(args[0])
			dstID, dst, dstRemote := remotePath(args[1])
			opts := fileOpts(user)
			switch {
			case srcRemote && !dstRemote:
				return a.download(cmd.Context(), c, srcID, src, args[1], opts)
			case dstRemote && !srcRemote:
				return a.upload(cmd.Context(), c, args[0], dstID, dst, opts)
			}
			return usageError{errors.New("cp: exactly one of SRC and DST must be INSTANCE:PATH")}
		},
	}
	cmd.Flags().StringVar(&user, "user", "", "act as this user of the instance (name or uid; default the image's user)")
	return cmd
}

// isRemoteDir reports whether p is a directory in the instance.
func isRemoteDir(ctx context.Context, c *client.Client, id, p string, opts []client.FileOption) (bool, error) {
	_, err := c.ListFiles(ctx, id, p, opts...)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, errdefs.ErrNotFound), errors.Is(err, errdefs.ErrFailedPrecondition):
		return false, nil
	}
	return false, err
}

func (a *app) upload(ctx context.Context, c *client.Client, local, id, dst string, opts []client.FileOption) error {
	st, err := os.Stat(local)
	if err != nil {
		return err
	}
	isDir, err := isRemoteDir(ctx, c, id, dst, opts)
	if err != nil {
		return err
	}
	target := dst
	if isDir {
		target = path.Join(dst, filepath.Base(filepath.Clean(local)))
	}
	if !st.IsDir() {
		f, err := os.Open(local)
		if err != nil {
			return err
		}
		defer f.Close()
		fi, err := c.WriteFile(ctx, id, target, f, append(opts, client.WithMode(uint32(st.Mode().Perm())))...)
		if err != nil {
			return err
		}
		return a.emit(fi, func(w io.Writer) { fmt.Fprintf(w, "%s:%s (%d bytes)\n", id, fi.Path, fi.Size) })
	}
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		_, err := tarfs.Write(ctx, local, tw, tarfs.Options{NoDevices: true})
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
	}()
	res, err := c.UploadArchive(ctx, id, target, pr, append(opts, client.WithMkdir())...)
	pr.CloseWithError(err)
	if err != nil {
		return err
	}
	return a.emit(res, func(w io.Writer) { fmt.Fprintf(w, "%s:%s (%d entries)\n", id, res.Path, res.Entries) })
}

func (a *app) download(ctx context.Context, c *client.Client, id, src, local string, opts []client.FileOption) error {
	r, err := c.ReadFile(ctx, id, src, 0, 0, opts...)
	if err != nil {
		return err
	}
	defer r.Close()
	base := path.Base(src)
	if src == "/" {
		base = "root"
	}
	target := local
	if st, err := os.Stat(local); err == nil && st.IsDir() {
		target = filepath.Join(local, base)
	}
	if r.Dir {
		r.Close()
		if err := os.MkdirAll(target, 0o755); err != nil {
			return err
		}
		tarball, err := c.DownloadArchive(ctx, id, src, opts...)
		if err != nil {
			return err
		}
		defer tarball.Close()
		uid, gid := os.Getuid(), os.Getgid()
		n, err := tarfs.Extract(ctx, target, tarball, tarfs.ExtractOptions{What: target,
			MapOwner: func(int, int) (int, int, error) { return uid, gid, nil }})
		if err != nil {
			return err
		}
		return a.emit(types.FileArchiveResult{Path: target, Entries: n}, func(w io.Writer) { fmt.Fprintf(w, "%s (%d entries)\n", target, n) })
	}
	if local == "-" {
		_, err := io.Copy(a.stdout, r)
		return err
	}
	mode := os.FileMode(0o644)
	if l, err := c.ListFiles(ctx, id, path.Dir(src), opts...); err == nil {
		for _, e := range l.Entries {
			if e.Name == base {
				if m, err := strconv.ParseUint(e.Mode, 8, 32); err == nil {
					mode = os.FileMode(m).Perm()
				}
			}
		}
	}
	tmp, err := os.CreateTemp(filepath.Dir(target), "."+filepath.Base(target)+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	n, err := io.Copy(tmp, r)
	if err == nil {
		err = tmp.Chmod(mode)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if r.Size >= 0 && n != r.Size {
		return fmt.Errorf("cp %s:%s: got %d of %d bytes", id, src, n, r.Size)
	}
	if err := os.Rename(tmp.Name(), target); err != nil {
		return err
	}
	return a.emit(types.FileInfo{Name: filepath.Base(target), Path: target, Type: types.FileTypeFile, Size: n, Mode: fmt.Sprintf("%04o", mode)},
		func(w io.Writer) { fmt.Fprintf(w, "%s (%d bytes)\n", target, n) })
}

// isFileArg tells ls's INSTANCE:PATH from a project name (which has no
// colon).
func isFileArg(arg string) bool { return strings.Contains(arg, ":") }
