package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/envd-dev/envd/internal/syncbuf"
	"github.com/envd-dev/envd/runtime"
)

// hardeningLimits are the hardened variant's limits: generous enough that
// apt never meets them, so what is measured is the cost of having them.
// No CPU quota: a quota below the machine's cores would measure itself.
var hardeningLimits = runtime.Limits{MemoryBytes: 2 << 30, Pids: 4096, CPUWeight: 100, IOWeight: 100}

// runHardening measures the Graphviz install in a fresh instance of two
// runtimes on one containerd: one as a node runs instances (hardening,
// limits, network rules with egress open), one with
// runtime.Config.Unrestricted. The variants alternate, each run in a new
// instance made from the same image, so load on the machine hits both.
func runHardening(ctx context.Context, cfg config, out io.Writer) (rErr error) {
	parts, stop, err := startRuntimeParts(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() { rErr = errors.Join(rErr, stop()) }()
	ref := parts.ref

	type variant struct {
		name string
		rt   *runtime.Runtime
		runs []time.Duration
	}
	mk := func(name, ns, bridge, subnet string, unrestricted bool) (*variant, error) {
		rcfg := parts.runtimeConfig(ns, filepath.Join(cfg.work, "state-"+ns), runtime.NetworkConfig{Bridge: bridge, Subnet: subnet})
		rcfg.Unrestricted = unrestricted
		rt, err := runtime.New(ctx, rcfg)
		if err != nil {
			return nil, err
		}
		if err := rt.Pull(ctx, ref); err != nil {
			_ = rt.Close()
			return nil, err
		}
		return &variant{name: name, rt: rt}, nil
	}
	hardened, err := mk("hardened: seccomp, caps, limits, network rules (egress open)", "envdbench-h", cfg.bridge, cfg.subnet, false)
	if err != nil {
		return err
	}
	plain, err := mk("unrestricted (Config.Unrestricted)", "envdbench-p", cfg.bridge+"p", plainSubnet(cfg.subnet), true)
	if err != nil {
		_ = hardened.rt.Close()
		return err
	}
	variants := []*variant{hardened, plain}
	defer func() {
		for _, v := range variants {
			rErr = errors.Join(rErr, v.rt.DestroyNetwork(), v.rt.Close())
		}
	}()

	var lastLine string
	for i := range cfg.runs {
		for _, v := range variants {
			id := fmt.Sprintf("graphviz-%d", i)
			d, line, err := installOnce(ctx, v.rt, id, ref, filepath.Join(cfg.work, fmt.Sprintf("apt-%s-%d.log", id, len(v.runs))))
			if err != nil {
				return fmt.Errorf("%s, run %d: %w", v.name, i+1, err)
			}
			logf("run %d %-60s %s", i+1, v.name, seconds(d))
			v.runs = append(v.runs, d)
			lastLine = line
		}
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "Machine: %s\n\n", machine())
	fmt.Fprintf(&b, "Date: %s\n\n", time.Now().UTC().Format("Mon Jan _2 15:04:05 UTC 2006"))
	fmt.Fprintf(&b, "Command: `%s`\n\n", command())
	fmt.Fprintf(&b, "Change: `%s` in a fresh Debian bookworm minbase instance per run; last line: `%s`\n\n", installCmd, lastLine)
	fmt.Fprintf(&b, "Hardened limits: memory %d MiB, pids %d, CPU weight %d, IO weight %d (applied only where the host has blkio.weight), no CPU quota. "+
		"%d runs per variant, alternated; medians.\n\n",
		hardeningLimits.MemoryBytes>>20, hardeningLimits.Pids, hardeningLimits.CPUWeight, hardeningLimits.IOWeight, cfg.runs)
	mdTable(&b, []string{"variant", "median", "runs"}, 1, [][]string{
		{hardened.name, seconds(median(hardened.runs)), secondsList(hardened.runs)},
		{plain.name, seconds(median(plain.runs)), secondsList(plain.runs)},
	})
	fmt.Fprintf(&b, "\nRatio hardened / unrestricted: %.2f\n", float64(median(hardened.runs))/float64(median(plain.runs)))
	_, err = out.Write(b.Bytes())
	return err
}

// installOnce creates instance id, runs the Graphviz install in it and
// removes it; the output goes to logPath.
func installOnce(ctx context.Context, rt *runtime.Runtime, id, ref, logPath string) (d time.Duration, line string, rErr error) {
	return installIn(ctx, rt, runtime.InstanceSpec{ID: id, Image: ref, Limits: hardeningLimits}, logPath)
}

// installIn is installOnce in a new instance of spec.
func installIn(ctx context.Context, rt *runtime.Runtime, spec runtime.InstanceSpec, logPath string) (d time.Duration, line string, rErr error) {
	id := spec.ID
	if err := rt.Create(ctx, spec); err != nil {
		return 0, "", err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		rErr = errors.Join(rErr, rt.Remove(rctx, id))
	}()
	buf := &syncbuf.Buffer{}
	ictx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	start := time.Now()
	code, err := rt.Exec(ictx, id, runtime.ExecSpec{Args: []string{"/bin/sh", "-c", installCmd}, Stdout: buf, Stderr: buf})
	d = time.Since(start)
	_ = os.WriteFile(logPath, buf.Bytes(), 0o644)
	if err != nil {
		return d, "", err
	}
	if code != 0 {
		return d, "", fmt.Errorf("%q exited %d after %s (log %s):\n%s", installCmd, code, seconds(d), logPath, tail(buf.String(), 15))
	}
	return d, summaryLine(buf.String()), nil
}

// plainSubnet is the unrestricted runtime's subnet: the third octet of s
// plus one (10.231.7.0/24 -> 10.231.8.0/24).
func plainSubnet(s string) string {
	var a, b, c, d, bits int
	if n, _ := fmt.Sscanf(s, "%d.%d.%d.%d/%d", &a, &b, &c, &d, &bits); n != 5 {
		return s
	}
	return fmt.Sprintf("%d.%d.%d.%d/%d", a, b, (c+1)%256, d, bits)
}

func secondsList(ds []time.Duration) string {
	var b bytes.Buffer
	for i, d := range ds {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(seconds(d))
	}
	return b.String()
}
