package mountinfo

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRead(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "mountinfo")
	require.NoError(t, os.WriteFile(p, []byte(
		"36 35 98:0 / / rw,noatime master:1 - ext4 /dev/root rw\n"+
			"40 36 7:3 / /data/with\\040space rw shared:2 - ext4 /dev/loop3 rw\n"+
			"garbage line\n"), 0o644))
	infos, err := Read(p)
	require.NoError(t, err)
	require.Len(t, infos, 2)
	assert.Equal(t, Info{Dev: "7:3", MountPoint: "/data/with space", FSType: "ext4", Source: "/dev/loop3"}, infos[1])
}

func TestUnderSelf(t *testing.T) {
	t.Parallel()
	mps, err := Under("/")
	require.NoError(t, err)
	assert.Contains(t, mps, "/")
	none, err := Under(t.TempDir())
	require.NoError(t, err)
	assert.Empty(t, none)
}

func TestUnescape(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "/a b/c\\d", unescape(`/a\040b/c\134d`))
	assert.Equal(t, `/x\`, unescape(`/x\`))
}
