package types

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/errdefs"
)

// FuzzParseSize: an accepted size is a non-negative byte count that
// parses back to itself when printed.
func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"0", "1", "512M", "2G", "2Gi", "2GiB", "1T", "1t", "-1", "", "G", "1X",
		"9223372036854775807", "4194304T", "4194303T", "1KiBB", "1iB", " 1", "0x10"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize(s)
		if err != nil {
			require.ErrorIs(t, err, errdefs.ErrInvalidArgument)
			return
		}
		require.GreaterOrEqual(t, n, int64(0))
		again, err := ParseSize(strconv.FormatInt(n, 10))
		require.NoError(t, err)
		require.Equal(t, n, again)
	})
}
