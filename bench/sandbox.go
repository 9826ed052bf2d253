package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/envd-dev/envd/runtime"
)

// sandboxWorkloads are the commands timed in each class: fork and exec of
// many small processes and a walk of the image's tree (system calls, which
// gVisor's sentry serves), and shell arithmetic (CPU, no system calls).
var sandboxWorkloads = []struct{ name, cmd string }{
	{"syscall-heavy: 500 fork+exec of `cat`", `for i in $(seq 500); do cat /etc/hostname >/dev/null; done`},
	{"syscall-heavy: `find /usr` (stat of every file)", `find /usr -xdev >/dev/null`},
	{"CPU-bound: shell loop of 300,000 additions", `i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done`},
}

// sandboxExecs is how many `true` each exec round trip median is over.
const sandboxExecs = 20

// runSandbox measures the gVisor runtime class against runc on one node
// in the same run, alternating the classes each run, on the Debian image
// with the node's default hardening and exec agents: create to the first
// command's answer, the exec round trip, the workloads, the memory of an
// idle instance's cgroup (for gVisor the whole sandbox: its kernel, file
// proxy and the instance's processes), and the Graphviz install once per
// class.
func runSandbox(ctx context.Context, cfg config, out io.Writer) (rErr error) {
	parts, stop, err := startRuntimeParts(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() { rErr = errors.Join(rErr, stop()) }()
	ref := parts.ref
	rt, err := runtime.New(ctx, parts.runtimeConfig("envdbench-s", filepath.Join(cfg.work, "state"),
		runtime.NetworkConfig{Bridge: cfg.bridge, Subnet: cfg.subnet}))
	if err != nil {
		return err
	}
	defer func() { rErr = errors.Join(rErr, rt.DestroyNetwork(), rt.Close()) }()
	if err := rt.ClassErr(ctx, runtime.ClassGVisor); err != nil {
		return err
	}
	if err := rt.AgentsOff(); err != nil {
		logf("no exec agent (%v): every exec is a runtime exec", err)
	}
	if err := rt.Pull(ctx, ref); err != nil {
		return err
	}
	classes := []runtime.Class{runtime.ClassRunc, runtime.ClassGVisor}
	type result struct {
		first, exec []time.Duration
		work        [][]time.Duration
		mem         []int64
		install     time.Duration
		line        string
	}
	res := map[runtime.Class]*result{}
	for _, c := range classes {
		res[c] = &result{work: make([][]time.Duration, len(sandboxWorkloads))}
	}
	run := func(id string, args ...string) (time.Duration, error) {
		var o bytes.Buffer
		start := time.Now()
		code, err := rt.Exec(ctx, id, runtime.ExecSpec{Args: args, Stdout: &o, Stderr: &o})
		d := time.Since(start)
		if err == nil && code != 0 {
			err = fmt.Errorf("%v in %s: exit %d: %s", args, id, code, strings.TrimSpace(o.String()))
		}
		return d, err
	}
	remove := func(id string) error {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		return rt.Remove(rctx, id)
	}
	for i := range cfg.runs {
		// Alternate which class goes first, so neither always meets the
		// other's leftovers.
		order := classes
		if i%2 == 1 {
			order = []runtime.Class{classes[1], classes[0]}
		}
		for _, class := range order {
			r := res[class]
			id := fmt.Sprintf("sb-%s-%d", class, i)
			start := time.Now()
			if err := rt.Create(ctx, runtime.InstanceSpec{ID: id, Image: ref, Class: class, Limits: hardeningLimits}); err != nil {
				return err
			}
			if _, err := run(id, "true"); err != nil {
				return err
			}
			r.first = append(r.first, time.Since(start))
			for range sandboxExecs {
				d, err := run(id, "true")
				if err != nil {
					return err
				}
				r.exec = append(r.exec, d)
			}
			for w, wl := range sandboxWorkloads {
				d, err := run(id, "/bin/sh", "-c", wl.cmd)
				if err != nil {
					return err
				}
				r.work[w] = append(r.work[w], d)
			}
			// Idle: what the instance holds once its commands are done.
			time.Sleep(3 * time.Second)
			m, err := instanceMemory(id)
			if err != nil {
				return err
			}
			r.mem = append(r.mem, m)
			logf("run %d %s: first command %s, exec %s, memory %s MB", i+1, class, seconds(r.first[len(r.first)-1]),
				millis(median(r.exec[len(r.exec)-sandboxExecs:])), megabytes(m))
			if err := remove(id); err != nil {
				return err
			}
		}
	}
	for _, class := range classes {
		logf("install on %s: %s", class, installCmd)
		spec := runtime.InstanceSpec{ID: "sb-apt-" + string(class), Image: ref, Class: class, Limits: hardeningLimits}
		d, line, err := installIn(ctx, rt, spec, filepath.Join(cfg.work, "apt-"+string(class)+".log"))
		if err != nil {
			return fmt.Errorf("install on %s: %w", class, err)
		}
		res[class].install, res[class].line = d, line
	}

	ratio := func(g, r time.Duration) string {
		if r <= 0 {
			return "—"
		}
		return fmt.Sprintf("%.2fx", float64(g)/float64(r))
	}
	rc, gv := res[runtime.ClassRunc], res[runtime.ClassGVisor]
	rows := [][]string{
		{"create to the first command's answer", seconds(median(rc.first)), seconds(median(gv.first)), ratio(median(gv.first), median(rc.first))},
		{fmt.Sprintf("exec round trip (`true`, median of %d a run)", sandboxExecs), millis(median(rc.exec)), millis(median(gv.exec)), ratio(median(gv.exec), median(rc.exec))},
	}
	for w, wl := range sandboxWorkloads {
		rows = append(rows, []string{wl.name, seconds(median(rc.work[w])), seconds(median(gv.work[w])), ratio(median(gv.work[w]), median(rc.work[w]))})
	}
	rows = append(rows,
		[]string{"memory of an idle instance's cgroup (MB)", megabytes(medianInt(rc.mem)), megabytes(medianInt(gv.mem)),
			fmt.Sprintf("%.2fx", float64(medianInt(gv.mem))/float64(max(medianInt(rc.mem), 1)))},
		[]string{"Graphviz install (one run)", seconds(rc.install), seconds(gv.install), ratio(gv.install, rc.install)},
	)
	var b bytes.Buffer
	fmt.Fprintf(&b, "Machine: %s\n\n", machine())
	fmt.Fprintf(&b, "Date: %s\n\n", time.Now().UTC().Format("Mon Jan _2 15:04:05 UTC 2006"))
	fmt.Fprintf(&b, "Command: `%s`\n\n", command())
	fmt.Fprintf(&b, "Load average at the end: %s\n\n", loadAverage())
	fmt.Fprintf(&b, "Image: Debian bookworm minbase (%s MB), overlayfs, hardening and limits of the hardening scenario, exec agents; %d runs, classes alternated; medians.\n\n", megabytes(parts.img.Size), cfg.runs)
	mdTable(&b, []string{"", "runc", "gvisor", "gvisor / runc"}, 1, rows)
	fmt.Fprintf(&b, "\nInstall last lines: runc `%s`; gvisor `%s`\n", rc.line, gv.line)
	_, err = out.Write(b.Bytes())
	return err
}

// instanceMemory is memory.usage_in_bytes of instance id's cgroup (v1).
func instanceMemory(id string) (int64, error) {
	matches, _ := filepath.Glob("/sys/fs/cgroup/memory/envd-*/*/" + id + "/memory.usage_in_bytes")
	if len(matches) != 1 {
		return 0, fmt.Errorf("memory cgroup of instance %s: %d matches", id, len(matches))
	}
	raw, err := os.ReadFile(matches[0])
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "—"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "—"
	}
	return strings.Join(f[:3], ", ")
}

func millis(d time.Duration) string {
	if d <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
}
