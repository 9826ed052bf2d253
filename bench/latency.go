package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/pkg/namespaces"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/node"
	"github.com/envd-dev/envd/runtime"
)

// latencySide is one side of the latency scenario: each metric's samples.
type latencySide struct {
	name    string
	samples map[string][]time.Duration
}

func (s *latencySide) add(metric string, d time.Duration) {
	if s.samples == nil {
		s.samples = map[string][]time.Duration{}
	}
	s.samples[metric] = append(s.samples[metric], d)
}

// The metrics of the latency scenario, in table order.
const (
	latRunning = "up to Running"
	latFirst   = "up to first command"
	latExec    = "exec round trip (buffered)"
	latExecWS  = "exec round trip (WebSocket)"
	// The same two once the instance's exec agent is connected (started
	// untimed, as a warm pool does): what every later command costs.
	latExecAgent   = "exec round trip, agent connected (buffered)"
	latExecAgentWS = "exec round trip, agent connected (WebSocket)"
	latSave        = "save of a tiny change"
	latRemove      = "rm"
)

var latMetrics = []string{latRunning, latFirst, latExec, latExecWS, latExecAgent, latExecAgentWS, latSave, latRemove}

// runLatency is the latency scenario (issue 15, item 1): the same version
// (busybox base plus one saved eStargz layer) started, exec'd into, saved
// and removed through the API, cached on the node and cold (its image
// deleted from containerd before each run, so the start pulls it lazily
// again), next to the floor of the same containerd, snapshotter and image
// (ctr run, ctr task exec, ctr task rm) and a bare runc run of the busybox
// rootfs. Sides alternate within each round so load drifts hit them alike.
func runLatency(ctx context.Context, cfg config, out io.Writer) (rErr error) {
	started := time.Now()
	load0 := loadAvg()
	b, err := busyboxBed(ctx, cfg, "latency")
	defer b.closeInto(&rErr)
	if err != nil {
		return err
	}
	const project = "lat"
	if err := b.project(ctx, project, "estargz"); err != nil {
		return err
	}
	if _, _, _, err := b.makeVersion(ctx, project, "echo 2 > /home/v2", "version 2"); err != nil {
		return err
	}
	v, err := b.c.GetVersion(ctx, project, 2)
	if err != nil {
		return err
	}
	ref := b.primary.RegistryAddr() + "/" + v.Image
	// The first start pulls it: from then on it is cached.
	in, err := b.up(ctx, project, 2)
	if err != nil {
		return err
	}
	b.remove(ctx, b.c, in.ID)
	sn, err := imageSnapshotter(ctx, b.primary, ref)
	if err != nil {
		return err
	}
	f, err := newFloor(b, ref, sn)
	if err != nil {
		return err
	}

	sides := []*latencySide{{name: "envd, cached"}, {name: "envd, cold lazy"}, {name: "ctr (same image, snapshotter " + sn + ")"}, {name: "runc run (bare)"}}
	runs := cfg.latencyRuns
	for r := 0; r < runs; r++ {
		for k := range sides {
			s := sides[(k+r)%len(sides)] // rotate the order every round
			var err error
			switch s.name {
			case sides[0].name:
				err = b.latencyRound(ctx, s, project, 2, r)
			case sides[1].name:
				if err = dropImage(ctx, b.primary, ref); err == nil {
					err = b.latencyRound(ctx, s, project, 2, r)
				}
			case sides[2].name:
				err = f.ctrRound(ctx, s, r)
			default:
				err = f.runcRound(ctx, s, r)
			}
			if err != nil {
				return fmt.Errorf("%s, run %d: %w", s.name, r+1, err)
			}
		}
		if (r+1)%10 == 0 {
			logf("latency: %d of %d rounds; up to first command p50 so far: cached %s, ctr %s", r+1, runs,
				msf(median(sides[0].samples[latFirst])), msf(median(sides[2].samples[latFirst])))
		}
	}
	load1 := loadAvg()

	var w bytes.Buffer
	header(&w)
	fmt.Fprintf(&w, "Load average (1, 5, 15 min): %s at the start, %s at the end.\n\n", load0, load1)
	fmt.Fprintf(&w, "Busybox base plus one saved eStargz layer (version 2), %d rounds; each round runs the four sides in an order rotated every round. "+
		"envd through the Go client on loopback: `up` (POST /v1/projects/{p}/instances, TTL 1h) to Running, then `exec true` (to first command), "+
		"one more buffered `exec true`, one over the WebSocket (both right after the first command; the instance's init starts the exec agent, so all three go through it, and wait for it to connect while it starts), "+
		"then the exec agent started (untimed, as a warm pool does) and one buffered and one WebSocket `exec true` through it, `echo N > /home/f` then a save (to the operation's result), then `rm`. "+
		"Cold lazy: the image deleted from containerd (garbage collected synchronously, so its lazy snapshots go) before each start; the stargz snapshotter's chunk cache on disk is kept. "+
		"ctr: the CLI against the node's containerd, same image and snapshotter: `ctr run --rm IMAGE ID true` (first command), `ctr run -d` (Running), "+
		"`ctr task exec true`, `ctr task rm -f` + `ctr container rm` (rm); each includes the CLI's own start, as the envd sides include the Go client's request. "+
		"runc: `runc run` of a bundle on the busybox rootfs (read-only, no network namespace set-up) running `true`.\n\n", runs)
	var cells [][]string
	pct := func(s *latencySide, m string) (string, string) {
		ds := s.samples[m]
		if len(ds) == 0 {
			return "—", "—"
		}
		return msf(median(ds)), msf(percentile(ds, 0.99))
	}
	for _, m := range latMetrics {
		row := []string{m}
		for _, s := range sides {
			p50, p99 := pct(s, m)
			row = append(row, p50, p99)
		}
		fm := m
		if m == latExecAgent || m == latExecAgentWS {
			fm = latExec // against ctr task exec
		}
		floor := median(sides[2].samples[fm])
		row = append(row, ratioX(median(sides[0].samples[m]), floor), ratioX(median(sides[1].samples[m]), floor), ratioX(median(sides[0].samples[m]), median(sides[3].samples[latFirst])))
		cells = append(cells, row)
	}
	mdTable(&w, []string{"metric", "envd cached p50", "p99", "envd cold lazy p50", "p99", "ctr p50", "p99", "runc p50", "p99",
		"cached / ctr (p50)", "cold / ctr (p50)", "cached / runc run (p50)"}, 1, cells)
	fmt.Fprintln(&w)
	fmt.Fprintf(&w, "- Targets (idle machine): exec round trip p50 within 1.5× of `ctr task exec` (here %s); up to first command p50 within 1.5× of `ctr run` (here %s).\n",
		ratioX(median(sides[0].samples[latExec]), median(sides[2].samples[latExec])),
		ratioX(median(sides[0].samples[latFirst]), median(sides[2].samples[latFirst])))
	fmt.Fprintf(&w, "- The agent rows are divided by `ctr task exec` in the ratio columns; exec round trip p50 through the agent / `ctr task exec`: %s.\n",
		ratioX(median(sides[0].samples[latExecAgent]), median(sides[2].samples[latExec])))
	fmt.Fprintf(&w, "- The runc column's only sample is a whole `runc run` (create, start, wait, delete), shown on the first-command row; the last column divides every envd metric by it.\n")
	fmt.Fprintf(&w, "- Scenario wall time: %s.\n", seconds(time.Since(started)))
	_, err = out.Write(w.Bytes())
	return err
}

// execPair times a buffered `exec true` in id as metric buffered, then
// one over the WebSocket as metric ws.
func (b *bed) execPair(ctx context.Context, s *latencySide, id, buffered, ws string) error {
	t := time.Now()
	res, err := b.c.Exec(ctx, id, types.ExecRequest{Args: []string{"true"}})
	if err != nil || res.ExitCode != 0 {
		return fmt.Errorf("exec true: %v (exit %d)", err, res.ExitCode)
	}
	s.add(buffered, time.Since(t))
	t = time.Now()
	if code, err := b.c.ExecStream(ctx, id, types.ExecRequest{Args: []string{"true"}}, types.Stdio{Stdout: io.Discard, Stderr: io.Discard}); err != nil || code != 0 {
		return fmt.Errorf("exec true over the WebSocket: %v (exit %d)", err, code)
	}
	s.add(ws, time.Since(t))
	return nil
}

// latencyRound is one round of an envd side.
func (b *bed) latencyRound(ctx context.Context, s *latencySide, project string, version, r int) error {
	start := time.Now()
	in, err := b.c.CreateInstance(ctx, project, types.CreateInstanceRequest{Version: version, TTL: "1h"})
	if err != nil {
		return err
	}
	s.add(latRunning, time.Since(start))
	if in.State != types.StateRunning {
		return fmt.Errorf("instance %s is %s: %s", in.ID, in.State, in.Message)
	}
	if _, err := sh(ctx, b.c, in.ID, "true"); err != nil {
		return err
	}
	s.add(latFirst, time.Since(start))
	if err := b.execPair(ctx, s, in.ID, latExec, latExecWS); err != nil {
		return err
	}
	if err := b.primary.Runtime().StartAgent(ctx, in.ID); err != nil {
		return fmt.Errorf("start the exec agent: %w", err)
	}
	if err := b.execPair(ctx, s, in.ID, latExecAgent, latExecAgentWS); err != nil {
		return fmt.Errorf("through the agent: %w", err)
	}
	if _, err := sh(ctx, b.c, in.ID, fmt.Sprintf("echo %d > /home/f", r)); err != nil {
		return err
	}
	t := time.Now()
	op, err := b.c.Save(ctx, in.ID, types.SaveRequest{Message: fmt.Sprintf("tiny %d", r)}, "")
	if err != nil {
		return err
	}
	if op, err = b.c.WaitOperation(ctx, op.ID, nil); err != nil {
		return err
	}
	if op.State != types.OpSucceeded {
		return fmt.Errorf("save %s: %s: %+v", op.ID, op.State, op.Error)
	}
	s.add(latSave, time.Since(t))
	t = time.Now()
	if _, err := b.c.DeleteInstance(ctx, in.ID); err != nil {
		return err
	}
	s.add(latRemove, time.Since(t))
	return nil
}

// imageSnapshotter is the snapshotter ref was unpacked for on n.
func imageSnapshotter(ctx context.Context, n *node.Node, ref string) (string, error) {
	cctx := namespaces.WithNamespace(ctx, node.DefaultNamespace)
	img, err := n.Runtime().Client().GetImage(cctx, ref)
	if err != nil {
		return "", err
	}
	if sn := img.Labels()[runtime.LabelSnapshotter]; sn != "" {
		return sn, nil
	}
	return "overlayfs", nil
}

// dropImage deletes ref from n's containerd and collects garbage at once, so
// the next start pulls it again (lazily).
func dropImage(ctx context.Context, n *node.Node, ref string) error {
	cctx := namespaces.WithNamespace(ctx, node.DefaultNamespace)
	err := n.Runtime().Client().ImageService().Delete(cctx, ref, images.SynchronousDelete())
	if err != nil {
		return fmt.Errorf("delete image %s: %w", ref, err)
	}
	return nil
}

// floor runs the same image with the containerd CLI and the busybox rootfs
// with bare runc.
type floor struct {
	addr, ref, sn string
	bundle        string // runc bundle
	runcRoot      string // runc run deletes its container when the process exits
	pid           int
}

func newFloor(b *bed, ref, sn string) (*floor, error) {
	f := &floor{addr: filepath.Join(b.primary.DataDir(), "containerd", "containerd.sock"), ref: ref, sn: sn,
		bundle: filepath.Join(b.dir, "runc-bundle"), runcRoot: filepath.Join(b.dir, "runc-root"), pid: os.Getpid()}
	if _, err := os.Stat(f.addr); err != nil {
		return nil, fmt.Errorf("containerd socket: %w", err)
	}
	for _, bin := range []string{"ctr", "runc"} {
		if _, err := exec.LookPath(bin); err != nil {
			return nil, fmt.Errorf("%s (PATH=/usr/local/lib/envd/bin:$PATH): %w", bin, err)
		}
	}
	if err := os.MkdirAll(f.bundle, 0o755); err != nil {
		return nil, err
	}
	if o, err := exec.Command("runc", "spec", "--bundle", f.bundle).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("runc spec: %v: %s", err, o)
	}
	p := filepath.Join(f.bundle, "config.json")
	raw, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	var spec map[string]any
	if err := json.Unmarshal(raw, &spec); err != nil {
		return nil, err
	}
	proc := spec["process"].(map[string]any)
	proc["terminal"], proc["args"] = false, []string{"true"}
	spec["root"] = map[string]any{"path": b.cfg.rootfs, "readonly": true}
	if raw, err = json.Marshal(spec); err != nil {
		return nil, err
	}
	return f, os.WriteFile(p, raw, 0o644)
}

func (f *floor) ctr(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, "ctr", append([]string{"-a", f.addr, "-n", node.DefaultNamespace}, args...)...)
	if o, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ctr %s: %v: %s", strings.Join(args, " "), err, o)
	}
	return nil
}

// ctrRound is one round of the ctr side.
func (f *floor) ctrRound(ctx context.Context, s *latencySide, r int) error {
	id := fmt.Sprintf("latbench-%d-%d", f.pid, r)
	t := time.Now()
	if err := f.ctr(ctx, "run", "--rm", "--snapshotter", f.sn, f.ref, id+"-once", "true"); err != nil {
		return err
	}
	s.add(latFirst, time.Since(t))
	t = time.Now()
	if err := f.ctr(ctx, "run", "-d", "--snapshotter", f.sn, f.ref, id, "sleep", "3600"); err != nil {
		return err
	}
	s.add(latRunning, time.Since(t))
	t = time.Now()
	if err := f.ctr(ctx, "task", "exec", "--exec-id", "e1", id, "true"); err != nil {
		return err
	}
	s.add(latExec, time.Since(t))
	t = time.Now()
	if err := f.ctr(ctx, "task", "rm", "-f", id); err != nil {
		return err
	}
	if err := f.ctr(ctx, "container", "rm", id); err != nil {
		return err
	}
	s.add(latRemove, time.Since(t))
	return nil
}

// runcRound is one bare runc run.
func (f *floor) runcRound(ctx context.Context, s *latencySide, r int) error {
	id := fmt.Sprintf("latbench-runc-%d-%d", f.pid, r)
	t := time.Now()
	cmd := exec.CommandContext(ctx, "runc", "--root", f.runcRoot, "run", "--bundle", f.bundle, id)
	if o, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("runc run: %v: %s", err, o)
	}
	s.add(latFirst, time.Since(t))
	return nil
}

// loadAvg is /proc/loadavg's first three fields.
func loadAvg() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(raw))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], ", ")
}

// msf formats d in milliseconds.
func msf(d time.Duration) string {
	if d <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.0f ms", float64(d)/1e6)
}

// ratioX formats d/ref as "1.4×"; "—" when either is unknown.
func ratioX(d, ref time.Duration) string {
	if ref <= 0 || d <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f×", d.Seconds()/ref.Seconds())
}
