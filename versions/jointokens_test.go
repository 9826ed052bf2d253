package versions_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/versions"
)

// A join token is used once, before it expires by the database's clock;
// each refusal says why.
func TestJoinTokens(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	reason := func(err error) any {
		var d interface{ Details() map[string]any }
		if !errors.As(err, &d) {
			return nil
		}
		return d.Details()["reason"]
	}

	made, err := s.Nodes.CreateJoinToken(ctx, "envdjoin_good", "admin", time.Hour)
	require.NoError(t, err)
	assert.WithinDuration(t, made.CreatedAt.Add(time.Hour), made.ExpiresAt, time.Second)
	used, err := s.Nodes.UseJoinToken(ctx, "envdjoin_good", "node-b")
	require.NoError(t, err)
	assert.Equal(t, "node-b", used.UsedBy)
	require.NotNil(t, used.UsedAt)

	_, err = s.Nodes.CreateJoinToken(ctx, "envdjoin_short", "admin", time.Millisecond)
	require.NoError(t, err)
	time.Sleep(20 * time.Millisecond)

	tests := []struct {
		name, token, reason, says string
	}{
		{"used", "envdjoin_good", versions.JoinTokenUsed, `already used by node "node-b"`},
		{"expired", "envdjoin_short", versions.JoinTokenExpired, "expired at"},
		{"unknown", "envdjoin_never", versions.JoinTokenUnknown, "unknown"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.Nodes.UseJoinToken(ctx, tt.token, "node-c")
			require.ErrorIs(t, err, errdefs.ErrJoinToken)
			assert.Equal(t, tt.reason, reason(err))
			assert.ErrorContains(t, err, tt.says)
		})
	}
}
