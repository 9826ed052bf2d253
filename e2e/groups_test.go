package e2e

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// soleNodeTests are the tests that need the shared node to themselves: they
// do not call t.Parallel(), because they restart it, sweep its registry or
// read its totals, take node-wide slots, count its threads, time against it
// or change the host under it (docs/notes/testing.md says which and why).
// In one process Go runs them all before the parallel tests, each alone.
//
// $ENVD_E2E_GROUP splits the package into two processes that each start
// a node of their own, so the sequential tests no longer hold up the
// parallel ones (scripts/test.sh runs both at once):
//   - sole: only these tests, one after another, on their own node;
//   - shared: every other test.
//
// Unset, one process runs every test as before. A new test that does not
// call t.Parallel() belongs here; unlisted, it still runs correctly (in
// the shared process, before its parallel tests), only later.
var soleNodeTests = []string{
	"TestTenantSaveAndBuildLimits",
	"TestBadInputCatalogue",
	"TestBadInputChangesNothing",
	"TestRootCheckpoint",
	"TestRootCheckpointRetention",
	"TestRootFilesStalledArchivesHoldNoThread",
	"TestRootGCOrphanManifests",
	"TestRootGCCollectsAnAbandonedBranch",
	"TestRootGCRemovesVolumesOfDeletedProjects",
	"TestRootHostileFillRootfs",
	"TestHostileNetwork",
	"TestRootHostileRegistry",
	"TestRootHostileRuntime",
	"TestRootLazyRestore",
	"TestRootLazyStartDoesNotWaitForPrefetch",
	"TestRootTTLSurvivesRestart",
	"TestRootReconcileOrphansAndLostContainers",
	"TestRootMCPTenantScoped",
	"TestRootMCPTypeScript",
	"TestRootMetrics",
	"TestRootStaleGenerationFenced",
	"TestRootPoolClaim",
	"TestRootPoolClaimSkipsDeadInstance",
	"TestRootVersionExportImportsLazilyElsewhere",
	"TestRootPortsDialFloodShedsLoad",
	"TestRootConcurrentSavesQuotaIsAtomic",
	"TestRootProjectDeleteFreesBlobs",
	"TestRootFailedVersionCollected",
	"TestRootDenseDefaults",
	"TestRootFullNodeAnswersInsufficientCapacity",
	"TestRootRestartKeepsEverything",
	"TestRootRestartThawsInstanceFrozenByACrash",
	"TestRootRestoreInterruptedByRestart",
	"TestRootRestoreSettledAfterItsInstanceRan",
	"TestRootSavePauseDuringFirstPass",
	"TestRootRestartRemovesLeftoverScratch",
	"TestSDKTypeScript",
	"TestRootEventStreamResumesAcrossRestart",
}

// selectGroup narrows the run to $ENVD_E2E_GROUP's tests (see
// soleNodeTests) by setting -test.run or -test.skip; it must run after
// flag.Parse and before m.Run. With a group, the command line's own
// -run or -skip is refused rather than silently combined.
func selectGroup() error {
	group := os.Getenv("ENVD_E2E_GROUP")
	if group == "" {
		return nil
	}
	userSet := ""
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "test.run" || f.Name == "test.skip" {
			userSet = f.Name
		}
	})
	if userSet != "" {
		return fmt.Errorf("ENVD_E2E_GROUP=%s selects the tests itself; unset it to use -%s", group, strings.TrimPrefix(userSet, "test."))
	}
	names := make([]string, len(soleNodeTests))
	for i, n := range soleNodeTests {
		names[i] = regexp.QuoteMeta(n)
	}
	re := "^(" + strings.Join(names, "|") + ")$"
	switch group {
	case "sole":
		return flag.Set("test.run", re)
	case "shared":
		return flag.Set("test.skip", re)
	}
	return fmt.Errorf("ENVD_E2E_GROUP=%q: want sole or shared (or unset for every test)", group)
}

// The list above and the package's tests agree: every name in it is a
// test of the package that does not call t.Parallel() (a listed
// parallel test would run alone for nothing, a stale name hides a test
// that moved). Sequential tests not listed are reported, not failed:
// they still run correctly in the shared group.
func TestSoleNodeTestsAreTheSequentialOnes(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*_test.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("list the package's test files: %v (%d files)", err, len(files))
	}
	parallel := map[string]bool{} // test name -> calls t.Parallel()
	fset := token.NewFileSet()
	for _, f := range files {
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv != nil || fd.Body == nil || !strings.HasPrefix(fd.Name.Name, "Test") || fd.Name.Name == "TestMain" {
				continue
			}
			parallel[fd.Name.Name] = callsParallel(fd.Body)
		}
	}
	listed := map[string]bool{}
	for _, n := range soleNodeTests {
		if listed[n] {
			t.Errorf("%s is listed twice in soleNodeTests", n)
		}
		listed[n] = true
		par, ok := parallel[n]
		switch {
		case !ok:
			t.Errorf("soleNodeTests names %s, which is not a test of the package", n)
		case par:
			t.Errorf("soleNodeTests names %s, which calls t.Parallel(): drop it from the list", n)
		}
	}
	var unlisted []string
	for n, par := range parallel {
		if !par && !listed[n] {
			unlisted = append(unlisted, n)
		}
	}
	sort.Strings(unlisted)
	if len(unlisted) > 0 {
		t.Logf("sequential tests not in soleNodeTests (they run before the parallel ones in the shared group): %v", unlisted)
	}
}

// callsParallel reports whether body calls t.Parallel() as a statement of
// its own at its top level, where the tests of this package call it.
func callsParallel(body *ast.BlockStmt) bool {
	for _, s := range body.List {
		es, ok := s.(*ast.ExprStmt)
		if !ok {
			continue
		}
		call, ok := es.X.(*ast.CallExpr)
		if !ok {
			continue
		}
		if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Parallel" {
			return true
		}
	}
	return false
}
