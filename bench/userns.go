package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/envd-dev/envd/runtime"
)

// runUserNS measures what runtime.Config.UserNS costs on the Debian image:
// the first instance of an image (containerd chowns the image into a
// remapped snapshot), later ones, and instances without a user namespace,
// then runs the Graphviz install in a user namespace instance.
func runUserNS(ctx context.Context, cfg config, out io.Writer) (rErr error) {
	parts, stop, err := startRuntimeParts(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() { rErr = errors.Join(rErr, stop()) }()
	ref := parts.ref
	rcfg := parts.runtimeConfig("envdbench-u", filepath.Join(cfg.work, "state"),
		runtime.NetworkConfig{Bridge: cfg.bridge, Subnet: cfg.subnet})
	rcfg.UserNS = true
	rt, err := runtime.New(ctx, rcfg)
	if err != nil {
		return err
	}
	defer func() { rErr = errors.Join(rErr, rt.DestroyNetwork(), rt.Close()) }()
	if err := rt.Pull(ctx, ref); err != nil {
		return err
	}
	create := func(id string, hostIDs bool) (time.Duration, error) {
		start := time.Now()
		err := rt.Create(ctx, runtime.InstanceSpec{ID: id, Image: ref, HostIDs: hostIDs})
		return time.Since(start), err
	}
	remove := func(id string) error {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		return rt.Remove(rctx, id)
	}
	first, err := create("userns-first", false)
	if err != nil {
		return err
	}
	logf("first user namespace instance (chown of the image): %s", seconds(first))
	var plain, later []time.Duration
	for i := range cfg.runs {
		for _, hostIDs := range []bool{true, false} {
			id := fmt.Sprintf("c%d-%v", i, hostIDs)
			d, err := create(id, hostIDs)
			if err != nil {
				return err
			}
			if err := remove(id); err != nil {
				return err
			}
			if hostIDs {
				plain = append(plain, d)
			} else {
				later = append(later, d)
			}
			logf("run %d create (host ids %v): %s", i+1, hostIDs, seconds(d))
		}
	}
	logf("install in the user namespace instance: %s", installCmd)
	d, line, err := installOnce(ctx, rt, "userns-apt", ref, filepath.Join(cfg.work, "apt-userns.log"))
	if err != nil {
		return fmt.Errorf("install in a user namespace: %w", err)
	}
	if err := remove("userns-first"); err != nil {
		return err
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "Machine: %s\n\n", machine())
	fmt.Fprintf(&b, "Date: %s\n\n", time.Now().UTC().Format("Mon Jan _2 15:04:05 UTC 2006"))
	fmt.Fprintf(&b, "Command: `%s`\n\n", command())
	fmt.Fprintf(&b, "Image: Debian bookworm minbase (%s MB), overlayfs; %d runs of the later creates, alternated; medians.\n\n", megabytes(parts.img.Size), cfg.runs)
	mdTable(&b, []string{"instance create (until the init runs)", "time"}, 1, [][]string{
		{"first in a user namespace (the image chowned into a remapped snapshot)", seconds(first)},
		{"later in a user namespace, while the first holds the remapped snapshot", seconds(median(later))},
		{"with host ids (no user namespace)", seconds(median(plain))},
	})
	fmt.Fprintf(&b, "\nGraphviz install in a user namespace instance: %s, last line `%s`\n", seconds(d), line)
	_, err = out.Write(b.Bytes())
	return err
}
