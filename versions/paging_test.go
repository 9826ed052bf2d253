package versions_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/versions"
)

// fillVersions adds versions 2..n to project p of tenant in one statement.
func fillVersions(t testing.TB, s *versions.Store, n int) {
	t.Helper()
	_, err := s.Pool().Exec(context.Background(), `INSERT INTO versions (project_id, number, kind, state, image)
		SELECT p.id, g, 'snapshot', 'ready', 'reg/p@sha256:' || g FROM projects p, generate_series(2, $1) g WHERE p.name = 'p'`, n)
	require.NoError(t, err)
}

// fillInstances adds n instances of project p, some with the same
// creation time (the cursor's id breaks the tie).
func fillInstances(t testing.TB, s *versions.Store, n int) {
	t.Helper()
	_, err := s.Pool().Exec(context.Background(), `INSERT INTO instances (id, project_id, tenant_id, version, state, created_at)
		SELECT 'p-' || lpad(g::text, 5, '0'), p.id, p.tenant_id, 1, 'Running', '2026-11-30T00:00:00Z'::timestamptz + (g / 3) * interval '1 second'
		FROM projects p, generate_series(1, $1) g WHERE p.name = 'p'`, n)
	require.NoError(t, err)
}

// Following pages gives every item once, in the whole list's order.
func TestListPages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	newProject(t, s)
	fillVersions(t, s, 250)
	fillInstances(t, s, 250)

	var nums []int
	for after := 0; ; {
		page, err := s.Versions.ListVersionsAfter(ctx, tenant, "p", after, 100)
		require.NoError(t, err)
		if len(page) == 0 {
			break
		}
		require.LessOrEqual(t, len(page), 100)
		for _, v := range page {
			nums = append(nums, v.Number)
		}
		after = page[len(page)-1].Number
	}
	require.Len(t, nums, 250)
	for i, n := range nums {
		assert.Equal(t, i+1, n)
	}

	whole, err := s.Instances.ListInstances(ctx, tenant, "p")
	require.NoError(t, err)
	require.Len(t, whole, 250)
	var ids []string
	var cur versions.InstanceCursor
	for {
		page, err := s.Instances.ListInstancesAfter(ctx, tenant, "", cur, 7)
		require.NoError(t, err)
		if len(page) == 0 {
			break
		}
		for _, in := range page {
			ids = append(ids, in.ID)
		}
		last := page[len(page)-1]
		cur = versions.InstanceCursor{CreatedAt: last.CreatedAt, ID: last.ID}
	}
	want := make([]string, len(whole))
	for i, in := range whole {
		want[i] = in.ID
	}
	assert.Equal(t, want, ids)
}

// BenchmarkList: a whole list against one page, at 10,000 versions and
// 1,000 instances (go test -bench BenchmarkList -run '^$' ./versions/).
func BenchmarkList(b *testing.B) {
	ctx := context.Background()
	s, err := versions.Open(ctx, pgtestDSN(b))
	require.NoError(b, err)
	defer s.Close()
	_, _, err = s.Projects.CreateProject(ctx, versions.Project{Tenant: tenant, Name: "p", BaseImage: "reg/base@sha256:aaa"}, versions.Version{Message: "base"})
	require.NoError(b, err)
	fillVersions(b, s, 10000)
	fillInstances(b, s, 1000)
	_, err = s.Pool().Exec(ctx, "ANALYZE")
	require.NoError(b, err)
	for _, c := range []struct {
		name string
		list func() (int, error)
	}{
		{"versions/whole 10000", func() (int, error) { v, err := s.Versions.ListVersions(ctx, tenant, "p"); return len(v), err }},
		{"versions/first page of 100", func() (int, error) {
			v, err := s.Versions.ListVersionsAfter(ctx, tenant, "p", 0, 100)
			return len(v), err
		}},
		{"versions/last page of 100", func() (int, error) {
			v, err := s.Versions.ListVersionsAfter(ctx, tenant, "p", 9900, 100)
			return len(v), err
		}},
		{"instances/whole 1000", func() (int, error) { v, err := s.Instances.ListInstances(ctx, tenant, ""); return len(v), err }},
		{"instances/page of 100", func() (int, error) {
			v, err := s.Instances.ListInstancesAfter(ctx, tenant, "", versions.InstanceCursor{}, 100)
			return len(v), err
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				n, err := c.list()
				if err != nil || n == 0 {
					b.Fatal(n, err)
				}
			}
		})
	}
}
