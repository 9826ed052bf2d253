package execproto

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestBearerSubprotocolRoundTrip(t *testing.T) {
	t.Parallel()
	p := BearerSubprotocol("tok en/+=")
	assert.NotContains(t, p[len(BearerPrefix):], "=", "base64url without padding")
	got, ok := BearerToken(p)
	assert.True(t, ok)
	assert.Equal(t, "tok en/+=", got)
	for _, bad := range []string{Subprotocol, BearerPrefix, BearerPrefix + "!!!"} {
		_, ok := BearerToken(bad)
		assert.False(t, ok, bad)
	}
}
