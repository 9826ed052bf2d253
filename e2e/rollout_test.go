package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/client"
)

// importBusyboxBase imports a busybox base whose /etc/base-version and
// /etc/motd say version.
func importBusyboxBase(t testing.TB, name, version string) {
	t.Helper()
	importBusyboxBaseTo(t, env.c, name, version)
}

// importBusyboxBaseTo is importBusyboxBase on the node c talks to.
func importBusyboxBaseTo(t testing.TB, c *client.Client, name, version string) {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("bash", "../scripts/busybox-rootfs.sh", dir).CombinedOutput()
	require.NoError(t, err, string(out))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "etc/motd"), []byte("welcome to "+version+"\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "etc/base-version"), []byte(version+"\n"), 0o644))
	tarball, err := tarDir(dir)
	require.NoError(t, err)
	_, err = c.ImportImage(context.Background(), name, bytes.NewReader(tarball))
	require.NoError(t, err)
}

// fleetProject is one project of the fleet and the client of its tenant.
type fleetProject struct {
	c    *client.Client
	name string
}

// waitRollout polls a rollout until it leaves running.
func waitRollout(t *testing.T, id string) types.Rollout {
	t.Helper()
	deadline := time.Now().Add(4 * time.Minute)
	for {
		ro, err := env.c.GetRollout(ctx(t), id)
		require.NoError(t, err)
		if ro.State != types.RolloutRunning {
			return ro
		}
		require.True(t, time.Now().Before(deadline), "rollout %s still running: %v", id, ro.Totals)
		time.Sleep(500 * time.Millisecond)
	}
}

func rolloutStatuses(ro types.Rollout) map[string]string {
	out := map[string]string{}
	for _, p := range ro.Projects {
		out[p.Project] = p.Status
	}
	return out
}

// Twelve projects of two tenants on busybox base v1, each with its own
// change: one edits /etc/motd, which v2 also changes (conflicts), one
// declares a validation that fails on v2. A dry run reports the conflict
// and makes nothing; the rollout to v2 in waves of 4 with a failure budget
// of 2 switches the other ten; its report stays; a rollback switches them
// back except one whose owner moved current since.
func TestRootRolloutFleet(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	seq := projectSeq.Add(1)
	v1, v2 := fmt.Sprintf("fleet-v1-%d", seq), fmt.Sprintf("fleet-v2-%d", seq)
	importBusyboxBase(t, v1, "1")
	importBusyboxBase(t, v2, "2")

	tenant := fmt.Sprintf("fleet-b-%d", seq)
	tok, err := env.c.CreateToken(c, tenant, types.CreateTokenRequest{})
	require.NoError(t, err)
	other, err := client.New(env.node.URL, tok.Token)
	require.NoError(t, err)

	prefix := fmt.Sprintf("fleet%d-", seq)
	var fleet []fleetProject
	for i := range 12 {
		cl := env.c
		if i >= 8 {
			cl = other // four projects of another tenant
		}
		name := fmt.Sprintf("%s%02d", prefix, i)
		_, err := cl.CreateProject(c, types.CreateProjectRequest{Name: name, Base: v1})
		require.NoError(t, err)
		fleet = append(fleet, fleetProject{cl, name})
	}
	conflictP, failingP, movedP := fleet[3].name, fleet[9].name, fleet[5].name
	// Each project's own change, saved.
	for i, fp := range fleet {
		in, err := fp.c.CreateInstance(c, fp.name, types.CreateInstanceRequest{})
		require.NoError(t, err)
		script := fmt.Sprintf("mkdir -p /home/u && echo project-%d > /home/u/mine", i)
		if fp.name == conflictP {
			script += " && echo my motd > /etc/motd"
		}
		res, err := fp.c.Exec(c, in.ID, types.ExecRequest{Args: []string{"/bin/sh", "-c", script}})
		require.NoError(t, err)
		require.Equal(t, 0, res.ExitCode, res.Stderr)
		op, err := fp.c.Save(c, in.ID, types.SaveRequest{}, "")
		require.NoError(t, err)
		done, err := fp.c.WaitOperation(c, op.ID, nil)
		require.NoError(t, err)
		require.Equal(t, types.OpSucceeded, done.State, "%+v", done.Error)
		_, err = fp.c.DeleteInstance(c, in.ID)
		require.NoError(t, err)
	}
	_, err = other.SetProjectValidation(c, failingP, [][]string{{"sh", "-c", "grep -qx 1 /etc/base-version"}})
	require.NoError(t, err)
	// A project on another base is not selected.
	elsewhere := prefix + "elsewhere"
	_, err = env.c.CreateProject(c, types.CreateProjectRequest{Name: elsewhere, Base: fixtureBase})
	require.NoError(t, err)

	// Dry run: conflicts only, nothing made.
	before, err := env.c.ListVersions(c, fleet[0].name)
	require.NoError(t, err)
	dry, err := env.c.CreateRollout(c, types.CreateRolloutRequest{From: v1, To: v2, Selector: prefix + "*", DryRun: true})
	require.NoError(t, err)
	dry = waitRollout(t, dry.ID)
	assert.Equal(t, types.RolloutSucceeded, dry.State)
	assert.Equal(t, map[string]int{"clean": 11, "conflicts": 1}, dry.Totals)
	st := rolloutStatuses(dry)
	assert.Equal(t, "conflicts", st[conflictP])
	assert.NotContains(t, st, elsewhere)
	for _, p := range dry.Projects {
		if p.Project == conflictP {
			assert.Equal(t, []string{"/etc/motd"}, p.Conflicts)
		}
	}
	after, err := env.c.ListVersions(c, fleet[0].name)
	require.NoError(t, err)
	assert.Equal(t, len(before), len(after), "a dry run makes no version")

	// A running instance of a project keeps its version.
	running, err := env.c.CreateInstance(c, fleet[0].name, types.CreateInstanceRequest{})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = env.c.DeleteInstance(context.Background(), running.ID) })

	// The real rollout.
	start := time.Now()
	ro, err := env.c.CreateRollout(c, types.CreateRolloutRequest{From: v1, To: v2, Selector: prefix + "*", WaveSize: 4, MaxFailures: 2,
		Validate: [][]string{{"sh", "-c", "test -f /home/u/mine && grep -q welcome /etc/motd || test -f /etc/base-version"}}})
	require.NoError(t, err)
	assert.Len(t, ro.Projects, 12)
	op, err := env.c.WaitOperation(c, ro.OperationID, nil)
	require.NoError(t, err)
	require.Equal(t, types.OpSucceeded, op.State, "%+v", op.Error)
	ro, err = env.c.GetRollout(c, ro.ID)
	require.NoError(t, err)
	t.Logf("rollout of 12 projects, waves of 4: %s", time.Since(start).Round(time.Millisecond))
	assert.Equal(t, types.RolloutSucceeded, ro.State, ro.Message)
	assert.Equal(t, map[string]int{"switched": 10, "conflicts": 1, "validation_failed": 1}, ro.Totals)
	st = rolloutStatuses(ro)
	assert.Equal(t, "conflicts", st[conflictP])
	assert.Equal(t, "validation_failed", st[failingP])
	for _, p := range ro.Projects {
		switch p.Project {
		case failingP:
			assert.NotZero(t, p.NewVersion)
			assert.Contains(t, p.Message, "sh -c 'grep -qx 1 /etc/base-version' exited 1")
		case conflictP:
			assert.Zero(t, p.NewVersion, "not moved")
		default:
			assert.Equal(t, p.OldVersion+1, p.NewVersion, p.Project)
		}
	}
	// The waves: never more than 4 projects at once.
	evs, err := env.c.OperationEvents(c, ro.OperationID, 0)
	require.NoError(t, err)
	waves := 0
	for _, ev := range evs {
		if ev.Type == "wave" {
			waves++
		}
	}
	assert.GreaterOrEqual(t, waves, 3, "12 projects in waves of 4")

	// A switched project runs v2 with its own files.
	in := up(t, fleet[1].name, 0)
	assert.Equal(t, "2", mustSh(t, in.ID, "cat /etc/base-version"))
	assert.Equal(t, "project-1", mustSh(t, in.ID, "cat /home/u/mine"))
	p, err := env.c.GetProject(c, fleet[1].name)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(p.CurrentBase, v2+" ("), p.CurrentBase)
	got, err := env.c.GetInstance(c, running.ID)
	require.NoError(t, err)
	assert.Equal(t, running.Version, got.Version, "the running instance keeps its version")
	assert.Equal(t, ro.Projects[0].NewVersion, got.NewerCurrent, "and says a newer base is current")
	// The failures are marked on the projects, for their owners.
	fp, err := other.GetProject(c, failingP)
	require.NoError(t, err)
	require.NotNil(t, fp.RolloutFailure)
	assert.Equal(t, "validation_failed", fp.RolloutFailure.Status)
	cp, err := env.c.GetProject(c, conflictP)
	require.NoError(t, err)
	require.NotNil(t, cp.RolloutFailure)
	assert.Equal(t, "conflicts", cp.RolloutFailure.Status)

	// The report stays.
	list, err := env.c.ListRollouts(c)
	require.NoError(t, err)
	var found bool
	for _, r := range list {
		if r.ID == ro.ID {
			found = true
			assert.Equal(t, ro.Totals, r.Totals)
		}
	}
	assert.True(t, found, "the rollout is listed")

	// Rollback: the owner of one project moved its current since.
	var moved types.RolloutProject
	for _, rp := range ro.Projects {
		if rp.Project == movedP {
			moved = rp
		}
	}
	exp := moved.NewVersion
	_, err = env.c.SetCurrent(c, movedP, types.SetCurrentRequest{Version: 1, ExpectedCurrent: &exp})
	require.NoError(t, err)
	backOp, err := env.c.RollbackRollout(c, ro.ID)
	require.NoError(t, err)
	assert.Equal(t, types.OpKindRollback, backOp.Kind)
	backOp, err = env.c.WaitOperation(c, backOp.ID, nil)
	require.NoError(t, err)
	require.Equal(t, types.OpSucceeded, backOp.State, "%+v", backOp.Error)
	back, err := env.c.GetRollout(c, ro.ID)
	require.NoError(t, err)
	assert.Equal(t, types.RolloutRolledBack, back.State)
	assert.Equal(t, map[string]int{"rolled_back": 9, "switched": 1, "conflicts": 1, "validation_failed": 1}, back.Totals)
	for _, rp := range back.Projects {
		if rp.Project == movedP {
			assert.Equal(t, "switched", rp.Status)
			assert.Contains(t, rp.Message, "not rolled back")
		}
	}
	for _, fp := range fleet {
		pr, err := fp.c.GetProject(c, fp.name)
		require.NoError(t, err)
		switch fp.name {
		case movedP:
			assert.Equal(t, 1, pr.Current, "the owner's switch is not touched")
		default:
			assert.Equal(t, 2, pr.Current, "%s is back on its saved version", fp.name)
		}
	}
	again, err := env.c.RollbackRollout(c, ro.ID)
	require.NoError(t, err, "asking again is not refused")
	assert.Equal(t, backOp.ID, again.ID, "it answers the rollback that finished")
}

// Per-project migrate with a real shell validation, the base the current
// version sits on, and a migration onto that base refused at once.
func TestRootMigrateShellValidation(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	seq := projectSeq.Add(1)
	v2 := fmt.Sprintf("shv-v2-%d", seq)
	importBusyboxBase(t, v2, "2")
	p := newProject(t, "shv")
	a := up(t, p, 0)
	mustSh(t, a.ID, "echo mine > /root-file")
	save(t, a.ID, "mine")

	op, err := env.c.Migrate(c, p, types.MigrateRequest{Base: v2, Switch: true,
		Validate: [][]string{{"sh", "-c", "test -e /nonexistent"}}})
	require.NoError(t, err)
	done, err := env.c.WaitOperation(c, op.ID, nil)
	require.NoError(t, err)
	require.Equal(t, types.OpFailed, done.State)
	assert.Contains(t, done.Error.Message, "sh -c 'test -e /nonexistent' exited 1")
	assert.NotEmpty(t, done.Result, "a failed migration carries its result (the failed version, the conflicts)")

	op, err = env.c.Migrate(c, p, types.MigrateRequest{Base: v2, Switch: true,
		Validate: [][]string{{"sh", "-c", "test -e /root-file && test \"$(cat /etc/base-version)\" = 2"}}})
	res := succeeded[types.MigrateResult](t, op, err)
	assert.True(t, res.Current)
	assert.Equal(t, []string{}, res.Conflicts)
	proj, err := env.c.GetProject(c, p)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(proj.CurrentBase, v2+" ("), proj.CurrentBase)

	_, err = env.c.Migrate(c, p, types.MigrateRequest{Base: v2})
	var apiErr *types.Error
	require.True(t, errors.As(err, &apiErr), "refused at once, not an operation: %v", err)
	assert.Equal(t, 409, apiErr.Status)
}

// eventTypes are the types of operation id's events, in order.
func eventTypes(t *testing.T, c *client.Client, id string) []string {
	t.Helper()
	evs, err := c.OperationEvents(context.Background(), id, 0)
	require.NoError(t, err)
	out := make([]string, 0, len(evs))
	for _, e := range evs {
		out = append(out, e.Type)
	}
	return out
}

// awaitEvent waits until operation id has an event of type typ.
func awaitEvent(t *testing.T, c *client.Client, id, typ string) {
	t.Helper()
	require.Eventually(t, func() bool {
		evs, err := c.OperationEvents(context.Background(), id, 0)
		if err != nil {
			return false
		}
		for _, e := range evs {
			if e.Type == typ {
				return true
			}
		}
		return false
	}, 3*time.Minute, 20*time.Millisecond, "operation %s: no %s event", id, typ)
}

// envd killed with SIGKILL while a rollout switches projects, then while
// its rollback switches them back: each time the next envd finishes the
// operation; every project ends where the report says (switched and on
// its new version, then rolled_back and on its old one), none skipped.
func TestRootKillDuringRollout(t *testing.T) {
	t.Parallel()
	bin := buildEnvd(t)
	dataDir := killDataDir(t, bin)
	c := context.Background()
	p, cl := startEnvd(t, bin, dataDir)
	importBusyboxBaseTo(t, cl, "v1", "1")
	importBusyboxBaseTo(t, cl, "v2", "2")
	const n = 6
	for i := range n {
		name := fmt.Sprintf("k%d", i)
		_, err := cl.CreateProject(c, types.CreateProjectRequest{Name: name, Base: "v1"})
		require.NoError(t, err)
		in, err := cl.CreateInstance(c, name, types.CreateInstanceRequest{})
		require.NoError(t, err)
		res, err := cl.Exec(c, in.ID, types.ExecRequest{Args: []string{"/bin/sh", "-c", fmt.Sprintf("echo %d > /mine", i)}})
		require.NoError(t, err)
		require.Equal(t, 0, res.ExitCode, res.Stderr)
		op, err := cl.Save(c, in.ID, types.SaveRequest{}, "")
		require.NoError(t, err)
		done, err := cl.WaitOperation(c, op.ID, nil)
		require.NoError(t, err)
		require.Equal(t, types.OpSucceeded, done.State, "%+v", done.Error)
		_, err = cl.DeleteInstance(c, in.ID)
		require.NoError(t, err)
	}

	ro, err := cl.CreateRollout(c, types.CreateRolloutRequest{From: "v1", To: "v2", WaveSize: 1})
	require.NoError(t, err)
	require.Len(t, ro.Projects, n)
	awaitEvent(t, cl, ro.OperationID, "project") // one project recorded, the next on its way
	p.kill(t)
	p, cl = startEnvd(t, bin, dataDir)
	op, err := cl.WaitOperation(c, ro.OperationID, nil)
	require.NoError(t, err)
	require.Equal(t, types.OpSucceeded, op.State, "%+v", op.Error)
	ro, err = cl.GetRollout(c, ro.ID)
	require.NoError(t, err)
	assert.Equal(t, map[string]int{"switched": n}, ro.Totals)
	assert.Contains(t, eventTypes(t, cl, ro.OperationID), "resumed", "the kill landed while the rollout ran")
	for _, rp := range ro.Projects {
		pr, err := cl.GetProject(c, rp.Project)
		require.NoError(t, err)
		assert.Equal(t, rp.NewVersion, pr.Current, "%s is on the version the report says", rp.Project)
	}

	back, err := cl.RollbackRollout(c, ro.ID)
	require.NoError(t, err)
	awaitEvent(t, cl, back.ID, "project")
	p.kill(t)
	p, cl = startEnvd(t, bin, dataDir)
	defer p.kill(t)
	again, err := cl.RollbackRollout(c, ro.ID)
	require.NoError(t, err, "asking again after the kill is not refused")
	assert.Equal(t, back.ID, again.ID, "it answers the rollback the restart resumed")
	back, err = cl.WaitOperation(c, back.ID, nil)
	require.NoError(t, err)
	require.Equal(t, types.OpSucceeded, back.State, "%+v", back.Error)
	t.Logf("rollback events after the kill: %v", eventTypes(t, cl, back.ID))
	ro, err = cl.GetRollout(c, ro.ID)
	require.NoError(t, err)
	assert.Equal(t, types.RolloutRolledBack, ro.State)
	assert.Equal(t, map[string]int{"rolled_back": n}, ro.Totals)
	for _, rp := range ro.Projects {
		pr, err := cl.GetProject(c, rp.Project)
		require.NoError(t, err)
		assert.Equal(t, rp.OldVersion, pr.Current, "%s is on its old version", rp.Project)
	}
	in, err := cl.CreateInstance(c, "k3", types.CreateInstanceRequest{})
	require.NoError(t, err)
	res, err := cl.Exec(c, in.ID, types.ExecRequest{Args: []string{"cat", "/etc/base-version", "/mine"}})
	require.NoError(t, err)
	assert.Equal(t, "1\n3\n", res.Stdout, "k3 runs its own change on v1 again")
}
