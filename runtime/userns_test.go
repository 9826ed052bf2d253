package runtime

import (
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/errdefs"
)

func TestParseUserNSLabel(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []specs.LinuxIDMapping
	}{
		{"default range", "1073741824:65536", []specs.LinuxIDMapping{{ContainerID: 0, HostID: 1 << 30, Size: 65536}}},
		{"no size", "1073741824", nil},
		{"zero size", "100000:0", nil},
		{"not a number", "x:65536", nil},
		{"past 32 bits", "4294967296:65536", nil},
		{"empty", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseUserNSLabel(tc.in)
			if tc.want == nil {
				require.ErrorIs(t, err, errdefs.ErrInvalidArgument)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}
