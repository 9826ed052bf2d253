package devcontainer

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/errdefs"
)

// FuzzParse: any input is parsed or refused with ErrInvalidArgument,
// never a panic; a refusal names the property when it is about one.
func FuzzParse(f *testing.F) {
	for _, s := range []string{`{"image": "d"}`, `// c` + "\n" + `{"image": "d",}`, `{"image": "d", "runArgs": []}`,
		`{"build": {"dockerfile": "D"}, "postCreateCommand": {"a": ["x"]}}`, `/*`, `{"a": "\"`, `[`, `{"image":"d","mounts":["source=a,target=/b"]}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		_, err := Parse([]byte(doc))
		if err != nil {
			require.ErrorIs(t, err, errdefs.ErrInvalidArgument)
		}
	})
}

// FuzzLifecycleShell: a lifecycle command given as an array reaches the
// program as those words, whatever bytes they hold.
func FuzzLifecycleShell(f *testing.F) {
	for _, s := range []string{"plain", "it's", "$(id)", "`x`", "a b", "\\", "\n", "'\"'"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, word string) {
		if strings.ContainsRune(word, 0) {
			return
		}
		dir := t.TempDir()
		out := filepath.Join(dir, "out")
		script := commandScript("postCreateCommand", Command{Args: []string{"/bin/sh", "-c", `printf %s "$1" > "$0"`, out, word}})
		b, err := exec.Command("/bin/sh", "-c", script).CombinedOutput()
		require.NoError(t, err, string(b))
		got, err := os.ReadFile(out)
		require.NoError(t, err)
		require.Equal(t, word, string(got))
	})
}
