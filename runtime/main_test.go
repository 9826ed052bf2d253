package runtime

import (
	"flag"
	"fmt"
	"os"
	"testing"
)

// defaultParallel is how many of this package's tests run at once unless
// -parallel says otherwise. Each root test starts a containerd, a registry
// and a network of its own and mostly waits on them: four at a time keep
// two cores busy (docs/notes/testing.md).
const defaultParallel = 4

func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		_ = flag.Set("test.parallel", fmt.Sprint(defaultParallel))
	}
	dir, err := os.MkdirTemp("", "envd-runtime-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testTmpDir = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// testTmpDir holds what the package's tests build once and share (the
// exec agent, buildAgent); TestMain removes it after the tests.
var testTmpDir string
