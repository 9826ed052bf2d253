package cluster

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
)

// A node offers placement its host's memory and disk times their
// overcommit, unless its capacity is given: with the dense defaults (2 GiB
// memory, 10 GiB disk a instance, 10x) a node takes ten times the
// instances a full reservation fits; a capacity given by hand is offered
// as it is.
func TestClusterDefaultsOvercommit(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	full := withDefaults(Config{}, dir)
	dense := withDefaults(Config{MemoryOvercommit: 10, DiskOvercommit: 10}, dir)
	require.Positive(t, full.Capacity.MemoryBytes)
	require.Positive(t, full.Capacity.DiskBytes)
	assert.Equal(t, full.Capacity.MemoryBytes*10, dense.Capacity.MemoryBytes)
	assert.InDelta(t, full.Capacity.DiskBytes*10, dense.Capacity.DiskBytes, float64(full.Capacity.DiskBytes)/100)

	given := withDefaults(Config{MemoryOvercommit: 10, DiskOvercommit: 10,
		Capacity: types.NodeCapacity{MemoryBytes: 8 << 30, DiskBytes: 100 << 30}}, dir)
	assert.Equal(t, int64(8<<30), given.Capacity.MemoryBytes)
	assert.Equal(t, int64(100<<30), given.Capacity.DiskBytes)

	// What placement makes of it: the instances that fit one node.
	fits := func(c Config) int {
		limits := types.Limits{MemoryBytes: 2 << 30, DiskBytes: 10 << 30}
		cand := Candidate{Name: "n", State: "ready", MemoryBytes: c.Capacity.MemoryBytes, DiskBytes: c.Capacity.DiskBytes}
		n := 0
		for ; n < 100000; n++ {
			if _, err := Place(Request{Limits: limits}, []Candidate{cand}); err != nil {
				break
			}
			cand.UsedMemory += limits.MemoryBytes
			cand.UsedDisk += limits.DiskBytes
			cand.Instances++
		}
		return n
	}
	assert.GreaterOrEqual(t, fits(dense), 9*fits(full), "full %d, dense %d", fits(full), fits(dense))
}
