package web

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBundleMatchesSources builds the console from src/ into a temporary
// directory and requires the committed dist/ to be the same, byte for
// byte: a change to the sources without a rebuild, or a hand edit of
// dist/, fails here.
func TestBundleMatchesSources(t *testing.T) {
	if _, err := os.Stat(filepath.Join("node_modules", "esbuild", "package.json")); err != nil {
		t.Fatalf("web/node_modules is missing (%v): run scripts/setup.sh (npm ci in web/)", err)
	}
	out := t.TempDir()
	cmd := exec.Command("node", "build.mjs", "--outdir", out)
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "node build.mjs: %s", b)

	built := readTree(t, os.DirFS(out))
	committed := readTree(t, Dist())
	names := func(m map[string][]byte) []string {
		var ns []string
		for n := range m {
			ns = append(ns, n)
		}
		slices.Sort(ns)
		return ns
	}
	require.Equal(t, names(built), names(committed), "web/dist does not match web/src: run scripts/web-build.sh and commit web/dist")
	for name, want := range built {
		assert.True(t, bytes.Equal(want, committed[name]), "web/dist/%s differs from a fresh build of web/src: run scripts/web-build.sh and commit web/dist", name)
	}
}

// TestSourcesTypecheck runs the TypeScript compiler over the console and
// the SDK sources it imports (esbuild strips types without checking them).
func TestSourcesTypecheck(t *testing.T) {
	tsc := filepath.Join("node_modules", "typescript", "bin", "tsc")
	if _, err := os.Stat(tsc); err != nil {
		t.Fatalf("web/node_modules is missing (%v): run scripts/setup.sh (npm ci in web/)", err)
	}
	out, err := exec.Command("node", tsc, "-p", ".").CombinedOutput()
	require.NoError(t, err, "tsc -p web: %s", out)
}

// The page the server fills in: one nonce placeholder, in the meta element
// the bundle reads.
func TestIndexCarriesTheNoncePlaceholder(t *testing.T) {
	index, err := fs.ReadFile(Dist(), "index.html")
	require.NoError(t, err)
	assert.Equal(t, 1, strings.Count(string(index), NoncePlaceholder))
	assert.Contains(t, string(index), `<meta name="envd-style-nonce" content="`+NoncePlaceholder+`">`)
	assert.NotContains(t, string(index), "{{", "a template name was left in index.html")
}

func readTree(t *testing.T, fsys fs.FS) map[string][]byte {
	t.Helper()
	m := map[string][]byte{}
	require.NoError(t, fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(fsys, p)
		m[p] = b
		return err
	}))
	return m
}
