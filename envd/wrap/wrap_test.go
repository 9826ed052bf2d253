package wrap

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
)

// log is the inner feature and the cross-cutting part at once: it records
// what was called, in order, and fails where told.
type log struct {
	calls []string
	fail  error // the inner call's error
	wake  error // WakeInstance's error
}

func (l *log) WakeInstance(context.Context, types.Principal, string) (types.Instance, error) {
	l.calls = append(l.calls, "wake")
	return types.Instance{}, l.wake
}
func (l *log) TouchInstance(string) { l.calls = append(l.calls, "touch") }
func (l *log) Exec(context.Context, types.Principal, string, types.ExecRequest) (types.ExecResult, error) {
	l.calls = append(l.calls, "exec")
	return types.ExecResult{}, l.fail
}
func (l *log) Stream(context.Context, types.Principal, string, types.ExecRequest, types.Stdio) (int, error) {
	l.calls = append(l.calls, "stream")
	return 0, l.fail
}
func (l *log) RenewInstance(context.Context, types.Principal, string, string) (types.Instance, error) {
	l.calls = append(l.calls, "renew")
	return types.Instance{}, l.fail
}
func (l *log) Save(context.Context, types.Principal, string, types.SaveRequest, string) (types.Operation, error) {
	l.calls = append(l.calls, "save")
	return types.Operation{}, l.fail
}
func (l *log) GetInstance(_ context.Context, _ types.Principal, id string) (types.Instance, error) {
	l.calls = append(l.calls, "get")
	return types.Instance{ID: id, Version: 1}, l.fail
}

func TestWakeOnExec(t *testing.T) {
	t.Parallel()
	ctx, p := context.Background(), types.Principal{Tenant: "t"}
	run := []string{"true"}
	for _, tc := range []struct {
		name  string
		req   types.ExecRequest
		wake  error
		calls []string
		err   error
	}{
		{"no wake asked", types.ExecRequest{Args: run}, nil, []string{"exec", "stream"}, nil},
		{"wake asked", types.ExecRequest{Args: run, Wake: true}, nil, []string{"wake", "exec", "wake", "stream"}, nil},
		{"bad request refused before the wake", types.ExecRequest{Wake: true}, nil, nil, errdefs.ErrInvalidArgument},
		{"a failed wake is the answer", types.ExecRequest{Args: run, Wake: true}, errdefs.ErrWaking, []string{"wake", "wake"}, errdefs.ErrWaking},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &log{wake: tc.wake}
			e := WakeOnExec(l, l)
			_, err1 := e.Exec(ctx, p, "i", tc.req)
			_, err2 := e.Stream(ctx, p, "i", tc.req, types.Stdio{})
			assert.Equal(t, tc.calls, l.calls)
			if tc.err == nil {
				assert.NoError(t, err1)
				assert.NoError(t, err2)
			} else {
				assert.ErrorIs(t, err1, tc.err)
				assert.ErrorIs(t, err2, tc.err)
			}
		})
	}
}

func TestTouchOnSuccessOnly(t *testing.T) {
	t.Parallel()
	ctx, p := context.Background(), types.Principal{Tenant: "t"}
	boom := errors.New("boom")
	for _, fail := range []error{nil, boom} {
		l := &log{fail: fail}
		_, err := TouchOnRenew(l, l).RenewInstance(ctx, p, "i", "1h")
		require.ErrorIs(t, err, fail)
		_, err = TouchOnSave(l, l).Save(ctx, p, "i", types.SaveRequest{}, "")
		require.ErrorIs(t, err, fail)
		if fail == nil {
			assert.Equal(t, []string{"renew", "touch", "save", "touch"}, l.calls)
		} else {
			assert.Equal(t, []string{"renew", "save"}, l.calls, "a failed call is no use")
		}
	}
}

func TestWithNewerCurrent(t *testing.T) {
	t.Parallel()
	ctx, p := context.Background(), types.Principal{Tenant: "t"}
	var asked string
	newer := func(_ context.Context, tenant string, in types.Instance) int { asked = tenant; return in.Version + 2 }
	in, err := WithNewerCurrent(&log{}, newer).GetInstance(ctx, p, "i")
	require.NoError(t, err)
	assert.Equal(t, 3, in.NewerCurrent)
	assert.Equal(t, "t", asked, "asked for the caller's tenant")

	asked = ""
	_, err = WithNewerCurrent(&log{fail: errdefs.ErrNotFound}, newer).GetInstance(ctx, p, "i")
	require.ErrorIs(t, err, errdefs.ErrNotFound)
	assert.Empty(t, asked, "no lookup for an instance not read")
}
