package envd

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/errdefs"
)

// The memory restore mode: full (or unset) pulls whole, lazy mounts when
// the node keeps memory images, anything else is refused.
func TestMemoryRestoreMode(t *testing.T) {
	mem := &memImages{}
	for _, mode := range []string{"", MemoryRestoreFull} {
		lz, err := lazyMemoryOf(mode, mem)
		require.NoError(t, err)
		assert.Nil(t, lz, "mode %q pulls whole", mode)
	}
	lz, err := lazyMemoryOf(MemoryRestoreLazy, mem)
	require.NoError(t, err)
	assert.NotNil(t, lz)
	lz, err = lazyMemoryOf(MemoryRestoreLazy, nil)
	require.NoError(t, err)
	assert.Nil(t, lz, "a node without memory images resumes none")
	_, err = lazyMemoryOf("userfaultfd", mem)
	assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)
}
