package types

import (
	"regexp"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The list is data that a typo would break quietly elsewhere: names must
// be path segments, unique, and states the instance can be in.
func TestInstanceVerbsAreWellFormed(t *testing.T) {
	t.Parallel()
	require.NotEmpty(t, InstanceVerbs)
	states := []InstanceState{StatePending, StateRunning, StatePausing, StatePaused, StateResuming,
		StateStopping, StateStopped, StateTerminated, StateFailed}
	segment := regexp.MustCompile(`^[a-z][a-z0-9-]*$`)
	seen := map[string]bool{}
	for _, v := range InstanceVerbs {
		assert.Regexp(t, segment, v.Name)
		assert.False(t, seen[v.Name], "%s listed twice", v.Name)
		seen[v.Name] = true
		assert.NotEmpty(t, v.From, v.Name)
		for _, s := range v.From {
			assert.True(t, slices.Contains(states, s), "%s: from %q", v.Name, s)
		}
		assert.True(t, slices.Contains(states, v.To), "%s: to %q", v.Name, v.To)
		assert.NotEmpty(t, v.Summary, v.Name)
		got, ok := LookupInstanceVerb(v.Name)
		assert.True(t, ok)
		assert.Equal(t, v, got)
	}
	_, ok := LookupInstanceVerb("hibernate")
	assert.False(t, ok, "a verb with a body is not a plain verb")
}
