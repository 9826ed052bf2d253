package shellwords

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []string
	}{
		{"plain", "test -f /etc/motd", []string{"test", "-f", "/etc/motd"}},
		{"sh -c in single quotes", "sh -c 'test -e /x && echo ok'", []string{"sh", "-c", "test -e /x && echo ok"}},
		{"double quotes keep $ literal words", `sh -c "echo \"a b\" \$HOME"`, []string{"sh", "-c", `echo "a b" $HOME`}},
		{"backslash escapes a blank", `ls a\ b`, []string{"ls", "a b"}},
		{"empty quoted word", `printf '' x`, []string{"printf", "", "x"}},
		{"adjacent parts make one word", `a'b c'"d"`, []string{"ab cd"}},
		{"extra blanks", "  a \t b  ", []string{"a", "b"}},
		{"nothing", "   ", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Split(tc.in)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
	for _, bad := range []string{"sh -c 'open", `echo "open`, `trailing\`} {
		_, err := Split(bad)
		assert.Error(t, err, bad)
	}
}

func TestJoinRoundTrips(t *testing.T) {
	for _, words := range [][]string{
		{"sh", "-c", "test -e /x"},
		{"echo", "it's", ""},
		{"a$b", "`c`", `d\e`, "f\"g"},
		{"test", "-f", "/etc/base-version"},
	} {
		line := Join(words)
		got, err := Split(line)
		require.NoError(t, err, line)
		assert.Equal(t, words, got, line)
	}
	assert.Equal(t, "sh -c 'test -e /x'", Join([]string{"sh", "-c", "test -e /x"}), "the command as the user typed it")
}
