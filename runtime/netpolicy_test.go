package runtime

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/errdefs"
)

func TestParseEgress(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"empty is open", "", "open"},
		{"open", "open", "open"},
		{"none", " none ", "none"},
		{"allow list normalized", "allow:10.1.2.3/8, Example.ORG,192.0.2.7,example.org", "allow:10.0.0.0/8,example.org,192.0.2.7"},
		{"wildcard", "allow:*.Allowed.TEST,10.0.0.0/8", "allow:*.allowed.test,10.0.0.0/8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := ParseEgress(tt.in)
			require.NoError(t, err)
			assert.Equal(t, tt.want, e.String())
			again, err := ParseEgress(e.String())
			require.NoError(t, err)
			assert.Equal(t, e, again, "the text form reads back")
		})
	}
	bad := []struct{ name, in string }{
		{"unknown mode", "closed"},
		{"empty allow list", "allow:"},
		{"ipv6 cidr", "allow:fc00::/7"},
		{"ipv6 address", "allow:::1"},
		{"bad host", "allow:exa mple.org"},
		{"shell", "allow:$(reboot)"},
		{"bare wildcard", "allow:*"},
		{"top-level wildcard", "allow:*.test"},
		{"inner wildcard", "allow:a.*.test"},
		{"too many", "allow:" + manyHosts(MaxEgressEntries+1)},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseEgress(tt.in)
			assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)
		})
	}
}

func manyHosts(n int) string {
	var hosts []string
	for i := range n {
		hosts = append(hosts, fmt.Sprintf("h%d.example", i))
	}
	return strings.Join(hosts, ",")
}

func TestParseDeny(t *testing.T) {
	r, err := parseDeny("192.0.2.10:5432")
	require.NoError(t, err)
	require.Len(t, r, 1)
	assert.Equal(t, "192.0.2.10/32", r[0].net.String())
	assert.Equal(t, 5432, r[0].port)
	r, err = parseDeny("198.51.100.0/24")
	require.NoError(t, err)
	assert.Equal(t, 0, r[0].port)
	r, err = parseDeny("127.0.0.1:5432")
	require.NoError(t, err)
	assert.Empty(t, r, "loopback needs no rule")
	_, err = parseDeny("192.0.2.10:notaport")
	assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)
}
