package lifecycle

import (
	"context"
	"slices"
	"testing"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The API serves a route per entry of types.InstanceVerbs and calls
// InstanceVerb with its name: every entry needs a method here, and a
// method without an entry would be unreachable.
func TestPlainVerbsMatchTheList(t *testing.T) {
	t.Parallel()
	var listed []string
	for _, v := range types.InstanceVerbs {
		listed = append(listed, v.Name)
	}
	var implemented []string
	for name := range (&Manager{}).verbs() {
		implemented = append(implemented, name)
	}
	slices.Sort(listed)
	slices.Sort(implemented)
	assert.Equal(t, listed, implemented)
}

func TestUnknownVerbIsNotFound(t *testing.T) {
	t.Parallel()
	_, err := (&Manager{}).InstanceVerb(context.Background(), types.Principal{Tenant: "t"}, "i-1", "hibernate")
	require.ErrorIs(t, err, errdefs.ErrNotFound)
}
