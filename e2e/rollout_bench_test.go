package e2e

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
)

// registryBytes is the size of the shared node's registry storage: what
// was pushed, as the registry keeps each blob once.
func registryBytes(b *testing.B) int64 {
	var n int64
	err := filepath.WalkDir(filepath.Join(env.dataDir, "registry"), func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err == nil {
			n += info.Size()
		}
		return err
	})
	require.NoError(b, err)
	return n
}

// benchChange is the project's own environment: 16 MiB of incompressible
// data and 200 small files.
const benchChange = "mkdir -p /opt/tool && head -c 16777216 /dev/urandom > /opt/tool/blob && " +
	"for i in $(seq 200); do echo file $i > /opt/tool/f$i; done"

// benchProject makes a project on base with the change saved, and returns
// the time the change itself took (create, exec, save).
func benchProject(b *testing.B, name, base, script string) time.Duration {
	c := context.Background()
	start := time.Now()
	_, err := env.c.CreateProject(c, types.CreateProjectRequest{Name: name, Base: base})
	require.NoError(b, err)
	in, err := env.c.CreateInstance(c, name, types.CreateInstanceRequest{})
	require.NoError(b, err)
	defer func() { _, _ = env.c.DeleteInstance(context.Background(), in.ID) }()
	res, err := env.c.Exec(c, in.ID, types.ExecRequest{Args: []string{"/bin/sh", "-c", script}})
	require.NoError(b, err)
	require.Equal(b, 0, res.ExitCode, res.Stderr)
	op, err := env.c.Save(c, in.ID, types.SaveRequest{}, "")
	require.NoError(b, err)
	done, err := env.c.WaitOperation(c, op.ID, nil)
	require.NoError(b, err)
	require.Equal(b, types.OpSucceeded, done.State, "%+v", done.Error)
	return time.Since(start)
}

// A migrated project against a rebuild of the same environment from
// scratch on the new base: time, and bytes the registry gained.
//
//	go test -count=1 -run '^$' -bench BenchmarkRootMigrateVsRebuild -benchtime 3x ./e2e/
func BenchmarkRootMigrateVsRebuild(b *testing.B) {
	seq := projectSeq.Add(1)
	v1, v2 := fmt.Sprintf("bench-v1-%d", seq), fmt.Sprintf("bench-v2-%d", seq)
	importBusyboxBase(b, v1, "1")
	importBusyboxBase(b, v2, "2")
	var migrateTime, rebuildTime time.Duration
	var migrateBytes, rebuildBytes int64
	for i := 0; b.Loop(); i++ {
		name := fmt.Sprintf("bench-mig-%d-%d", seq, i)
		benchProject(b, name, v1, benchChange)

		before := registryBytes(b)
		start := time.Now()
		op, err := env.c.Migrate(context.Background(), name, types.MigrateRequest{Base: v2, Switch: true,
			Validate: [][]string{{"test", "-f", "/opt/tool/blob"}}})
		require.NoError(b, err)
		done, err := env.c.WaitOperation(context.Background(), op.ID, nil)
		require.NoError(b, err)
		require.Equal(b, types.OpSucceeded, done.State, "%+v", done.Error)
		migrateTime += time.Since(start)
		migrateBytes += registryBytes(b) - before

		before = registryBytes(b)
		rebuildTime += benchProject(b, fmt.Sprintf("bench-reb-%d-%d", seq, i), v2, benchChange)
		rebuildBytes += registryBytes(b) - before
	}
	n := float64(b.N)
	b.ReportMetric(migrateTime.Seconds()/n, "migrate-s/project")
	b.ReportMetric(float64(migrateBytes)/n, "migrate-B/project")
	b.ReportMetric(rebuildTime.Seconds()/n, "rebuild-s/project")
	b.ReportMetric(float64(rebuildBytes)/n, "rebuild-B/project")
}

// Rollout wall time as the fleet grows (small projects: a few files saved
// on busybox), waves of 10, the node's default concurrency.
//
//	go test -count=1 -run '^$' -bench BenchmarkRootRolloutWall -benchtime 1x ./e2e/
func BenchmarkRootRolloutWall(b *testing.B) {
	for _, n := range []int{10, 30, 100} {
		b.Run(fmt.Sprintf("projects=%d", n), func(b *testing.B) {
			seq := projectSeq.Add(1)
			v1, v2 := fmt.Sprintf("wall-v1-%d", seq), fmt.Sprintf("wall-v2-%d", seq)
			importBusyboxBase(b, v1, "1")
			importBusyboxBase(b, v2, "2")
			prefix := fmt.Sprintf("wall%d-", seq)
			for i := range n {
				benchProject(b, fmt.Sprintf("%s%03d", prefix, i), v1, fmt.Sprintf("mkdir -p /home/u && echo %d > /home/u/mine", i))
			}
			for b.Loop() {
				ro, err := env.c.CreateRollout(context.Background(), types.CreateRolloutRequest{From: v1, To: v2, Selector: prefix + "*",
					WaveSize: 10, Validate: [][]string{{"test", "-f", "/home/u/mine"}}})
				require.NoError(b, err)
				op, err := env.c.WaitOperation(context.Background(), ro.OperationID, nil)
				require.NoError(b, err)
				require.Equal(b, types.OpSucceeded, op.State)
				ro, err = env.c.GetRollout(context.Background(), ro.ID)
				require.NoError(b, err)
				require.Equal(b, n, ro.Totals[types.RolloutProjectSwitched], "%v", ro.Totals)
				b.StopTimer()
				back, err := env.c.RollbackRollout(context.Background(), ro.ID) // the next loop moves them again
				require.NoError(b, err)
				back, err = env.c.WaitOperation(context.Background(), back.ID, nil)
				require.NoError(b, err)
				require.Equal(b, types.OpSucceeded, back.State)
				b.StartTimer()
			}
			b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/rollout")
			b.ReportMetric(b.Elapsed().Seconds()/float64(b.N)/float64(n), "s/project")
		})
	}
}
