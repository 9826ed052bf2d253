package node

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/errdefs"
)

// A Config without a Logger gets one of its LogFormat; a format Start does
// not know is refused before anything starts.
func TestLogFormatConfig(t *testing.T) {
	got, err := withDefaults(Config{DataDir: t.TempDir(), LogFormat: LogJSON})
	require.NoError(t, err)
	assert.IsType(t, &slog.JSONHandler{}, got.Logger.Handler())

	given := slog.New(slog.DiscardHandler)
	got, err = withDefaults(Config{DataDir: t.TempDir(), LogFormat: LogJSON, Logger: given})
	require.NoError(t, err)
	assert.Same(t, given, got.Logger, "a given logger is kept")

	_, err = withDefaults(Config{DataDir: t.TempDir(), LogFormat: "yaml"})
	assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)
	assert.ErrorContains(t, err, `log format "yaml"`)
}
