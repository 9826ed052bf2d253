package metrics

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReadMeminfo(t *testing.T) {
	for _, tc := range []struct {
		name, text   string
		avail, total int64
		err          bool
	}{
		{"kernel format", "MemTotal:       24681704 kB\nMemFree:         1000000 kB\nMemAvailable:   22954356 kB\n", 22954356 << 10, 24681704 << 10, false},
		{"no MemAvailable (kernel < 3.14)", "MemTotal:       24681704 kB\nMemFree:         1000000 kB\n", 0, 0, true},
		{"not a number", "MemTotal:       x kB\nMemAvailable:   1 kB\n", 0, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "meminfo")
			require.NoError(t, os.WriteFile(p, []byte(tc.text), 0o644))
			avail, total, err := readMeminfo(p)
			if tc.err {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.avail, avail)
			assert.Equal(t, tc.total, total)
		})
	}
}
