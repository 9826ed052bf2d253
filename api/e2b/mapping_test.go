package e2b

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
)

// Templates are projects: "name" and "name:latest" are current, "name:N"
// version N; anything else is refused with invalid_argument.
func TestParseTemplate(t *testing.T) {
	for id, want := range map[string]struct {
		project string
		version int
	}{"base": {"base", 0}, "base:latest": {"base", 0}, "base:default": {"base", 0}, "web:3": {"web", 3}} {
		p, v, err := parseTemplate(id)
		require.NoError(t, err, id)
		assert.Equal(t, want.project, p, id)
		assert.Equal(t, want.version, v, id)
	}
	for _, id := range []string{"", ":3", "base:v2", "base:0", "base:-1"} {
		_, _, err := parseTemplate(id)
		assert.ErrorIs(t, err, errdefs.ErrInvalidArgument, id)
	}
}

// envd's codes become Connect's: its own pass, the others map or are
// unknown; the message is kept.
func TestRPCErrorCodes(t *testing.T) {
	for code, want := range map[string]string{"not_found": "not_found", "quota_exceeded": "resource_exhausted",
		"conflict": "aborted", "unauthenticated": "unauthenticated", "something_new": "unknown"} {
		e := toRPCError(&types.Error{Status: 400, Code: code, Message: "m"})
		assert.Equal(t, rpcError{Code: want, Message: "m"}, e, code)
	}
	assert.Equal(t, "invalid_argument", toRPCError(fmt.Errorf("x: %w", errdefs.ErrInvalidArgument)).Code)
	assert.Equal(t, "failed_precondition", toRPCError(fmt.Errorf("x: %w", errdefs.ErrFailedPrecondition)).Code)
	assert.Equal(t, http.StatusNotImplemented, connectCodes[toRPCError(unimplemented("x")).Code])
}

// A stream request's envelope: its JSON decoded; none at all is the empty
// message; a compressed or oversized one is refused.
func TestReadEnvelope(t *testing.T) {
	var req startRequest
	require.NoError(t, readEnvelope(bytes.NewReader(envelopeOf(0, `{"process":{"cmd":"ls","args":["-l"]},"stdin":true}`)), &req))
	assert.Equal(t, "ls", req.Process.Cmd)
	assert.Equal(t, []string{"-l"}, req.Process.Args)
	assert.True(t, *req.Stdin)
	require.NoError(t, readEnvelope(bytes.NewReader(nil), &startRequest{}))
	err := readEnvelope(bytes.NewReader(envelopeOf(1, `{}`)), &startRequest{})
	var te *types.Error
	require.True(t, errors.As(err, &te), "%v", err)
	assert.Equal(t, "unimplemented", te.Code)
	big := []byte{0, 0xff, 0xff, 0xff, 0xff}
	assert.ErrorIs(t, readEnvelope(bytes.NewReader(big), &startRequest{}), errdefs.ErrInvalidArgument)
}

func envelopeOf(flags byte, msg string) []byte {
	n := len(msg)
	return append([]byte{flags, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}, msg...)
}

// envd's file events as E2B's: names relative to the watched directory, a
// move as RENAME of the old name and CREATE of the new.
func TestWatchEvents(t *testing.T) {
	for _, c := range []struct {
		ev   types.FileEvent
		want []fsEvent
	}{
		{types.FileEvent{Type: types.FileEventCreate, Path: "/w/a"}, []fsEvent{{"a", "EVENT_TYPE_CREATE"}}},
		{types.FileEvent{Type: types.FileEventModify, Path: "/w/sub/b"}, []fsEvent{{"sub/b", "EVENT_TYPE_WRITE"}}},
		{types.FileEvent{Type: types.FileEventDelete, Path: "/w/c"}, []fsEvent{{"c", "EVENT_TYPE_REMOVE"}}},
		{types.FileEvent{Type: types.FileEventMove, From: "/w/.tmp1", Path: "/w/d"}, []fsEvent{{".tmp1", "EVENT_TYPE_RENAME"}, {"d", "EVENT_TYPE_CREATE"}}},
		{types.FileEvent{Type: "something_new", Path: "/w/e"}, nil},
	} {
		assert.Equal(t, c.want, watchEvents("/w", c.ev), "%+v", c.ev)
	}
	assert.Equal(t, []fsEvent{{"x", "EVENT_TYPE_CREATE"}}, watchEvents("/", types.FileEvent{Type: types.FileEventCreate, Path: "/x"}))
}
