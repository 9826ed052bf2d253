package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/builder/devcontainer"
	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/errdefs"
)

// isDevcontainer reports whether -f names a devcontainer.json.
func isDevcontainer(file string) bool {
	base := strings.ToLower(filepath.Base(file))
	return base == "devcontainer.json" || base == ".devcontainer.json"
}

// devcontainerBuild translates the devcontainer.json at path (a file or a
// directory holding one) into req, a Dockerfile build with its context
// uploaded, after applying the project settings it names: its mounts as
// project volumes, its ports as the project's forwarded ports. Features
// are fetched here, on the client's side (the node reaches no registry
// outside its own); only public ones (anonymous pulls).
//
// A customizations.envd.spec is returned decoded (nil: none): it is built
// on the Dockerfile build's version.
func devcontainerBuild(ctx context.Context, c *client.Client, stderr io.Writer, project, path string, req *types.BuildRequest) (*types.BuildRequest, error) {
	file, err := devcontainer.Load(path)
	if err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "envctl-devcontainer-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	plan, err := devcontainer.Translate(ctx, file, devcontainer.Options{Work: work})
	if err != nil {
		return nil, err
	}
	for _, f := range plan.Features {
		fmt.Fprintf(stderr, "devcontainer: feature %s (%s %s)\n", f.Ref, f.Metadata.ID, f.Metadata.Version)
	}
	if err := applyDocker(ctx, c, stderr, project, plan.Config.Docker); err != nil {
		return nil, err
	}
	if err := applyMounts(ctx, c, stderr, project, plan.Volumes); err != nil {
		return nil, err
	}
	if err := applyPorts(ctx, c, project, plan.Ports); err != nil {
		return nil, err
	}
	tr, err := tarDirs(ctx, plan.ContextDir, plan.Extra, devcontainer.ExtraDir)
	if err != nil {
		return nil, err
	}
	defer tr.Close()
	bc, err := c.UploadBuildContext(ctx, project, tr)
	if err != nil {
		return nil, err
	}
	req.Dockerfile = &types.DockerfileBuild{Content: plan.Dockerfile, Args: plan.Args}
	req.Context = bc.Context
	if plan.EnvdSpec == nil {
		return nil, nil
	}
	var spec types.BuildRequest
	if err := readSpec(bytes.NewReader(plan.EnvdSpec), &spec); err != nil {
		return nil, errdefs.WithDetails(fmt.Errorf("devcontainer.json: customizations.envd.spec: %v: %w", err, errdefs.ErrInvalidArgument),
			map[string]any{"property": "customizations.envd.spec"})
	}
	return &spec, nil
}

// applyDocker turns the project's docker setting on when devcontainer.json
// asks for Docker inside ("privileged": true, runArgs --privileged). The
// node refuses it unless the project's runtime class is gvisor, with the
// reason and the way out (failed_precondition): the build does not start.
func applyDocker(ctx context.Context, c *client.Client, stderr io.Writer, project string, docker bool) error {
	if !docker {
		return nil
	}
	p, err := c.GetProject(ctx, project)
	if err != nil {
		return err
	}
	if p.Docker {
		return nil
	}
	if _, err := c.SetProjectDocker(ctx, project, true); err != nil {
		return fmt.Errorf("devcontainer.json: privileged (Docker inside): %w", err)
	}
	fmt.Fprintf(stderr, "devcontainer: docker turned on for project %s (its instances may run dockerd)\n", project)
	return nil
}

// applyMounts adds each mount as a project volume NAME:PATH, unless the
// project has that volume at that path; a volume of that name elsewhere
// is an error (nothing is moved).
func applyMounts(ctx context.Context, c *client.Client, stderr io.Writer, project string, mounts []devcontainer.Mount) error {
	if len(mounts) == 0 {
		return nil
	}
	vols, err := c.ListVolumes(ctx, project)
	if err != nil {
		return err
	}
	for _, m := range mounts {
		i := slices.IndexFunc(vols, func(v types.Volume) bool { return v.Name == m.Source })
		if i >= 0 {
			if vols[i].Path != m.Target {
				return errdefs.WithDetails(fmt.Errorf("devcontainer.json: mounts: volume %q is at %s in project %q, not at %s: %w",
					m.Source, vols[i].Path, project, m.Target, errdefs.ErrFailedPrecondition), map[string]any{"property": "mounts"})
			}
			continue
		}
		if _, err := c.AddVolume(ctx, project, types.AddVolumeRequest{Spec: m.Source + ":" + m.Target}); err != nil {
			return fmt.Errorf("devcontainer.json: mounts: volume %s:%s: %w", m.Source, m.Target, err)
		}
		fmt.Fprintf(stderr, "devcontainer: volume %s at %s added to project %s\n", m.Source, m.Target, project)
	}
	return nil
}

// applyPorts makes the ports devcontainer.json names the project's
// forwarded ports (their labels and protocols); public ports stay.
func applyPorts(ctx context.Context, c *client.Client, project string, ports []devcontainer.Port) error {
	if len(ports) == 0 {
		return nil
	}
	fwd := make([]types.ForwardedPort, len(ports))
	for i, p := range ports {
		fwd[i] = types.ForwardedPort{Port: p.Port, Label: p.Label, Scheme: p.Protocol}
	}
	cur, err := c.ProjectPorts(ctx, project)
	if err != nil {
		return err
	}
	_, err = c.SetProjectPorts(ctx, project, types.ProjectPorts{Public: cur.Public, Forwarded: fwd})
	return err
}

// tarDirs tars the context dir (none when "") and the entry name of
// extra, as one archive.
func tarDirs(ctx context.Context, dir, extra, name string) (io.ReadCloser, error) {
	args := []string{"--numeric-owner", "-cf", "-"}
	if dir != "" {
		args = append(args, "-C", dir, ".")
	}
	args = append(args, "-C", extra, name)
	return runTar(ctx, dir, args...)
}

// exportDevcontainer writes vs as a devcontainer.json (and Dockerfile)
// into dir (default .devcontainer), naming the image by its imported name
// when the node has one for it.
func (a *app) exportDevcontainer(ctx context.Context, c *client.Client, vs types.VersionSpec, dir string) error {
	if dir == "" || dir == "-" {
		dir = ".devcontainer"
	}
	image := vs.Base
	imgs, err := c.ListImages(ctx)
	if err != nil {
		return err
	}
	for _, im := range imgs {
		if im.Ref == vs.Base || strings.HasSuffix(vs.Base, "/"+im.Ref) {
			image = im.Name
			break
		}
	}
	files, err := devcontainer.Export(vs, image)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, name := range []string{"devcontainer.json", "Dockerfile"} {
		if b, ok := files[name]; ok {
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
				return err
			}
			fmt.Fprintf(a.stderr, "wrote %s\n", filepath.Join(dir, name))
		}
	}
	return nil
}
