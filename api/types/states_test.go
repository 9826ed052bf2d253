package types

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Typed states and kinds are strings on the wire, as they were before
// they had types.
func TestTypedStatesAreStringsOnTheWire(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		v    any
		want string
	}{
		{"instance state", Instance{State: StateRunning}, `"state":"Running"`},
		{"operation state and kind", Operation{Kind: OpKindSave, State: OpSucceeded}, `"kind":"save","target":"","state":"succeeded"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(tc.v)
			require.NoError(t, err)
			assert.Contains(t, string(b), tc.want)
		})
	}
	var op Operation
	require.NoError(t, json.Unmarshal([]byte(`{"kind":"gc","state":"canceled"}`), &op))
	assert.Equal(t, OpKindGC, op.Kind)
	assert.Equal(t, OpCanceled, op.State)
}

func TestInstanceStateLive(t *testing.T) {
	t.Parallel()
	for _, st := range []InstanceState{StatePending, StateRunning, StatePausing, StatePaused, StateResuming, StateStopping, StateStopped} {
		assert.True(t, st.Live(), st)
	}
	for _, st := range []InstanceState{StateTerminated, StateFailed, "Unknown"} {
		assert.False(t, st.Live(), st)
	}
}
