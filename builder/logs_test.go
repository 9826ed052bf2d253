package builder

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/internal/objstore"
)

type recorder struct {
	mu    sync.Mutex
	lines []string
}

func (r *recorder) Event(_ context.Context, typ, msg string, data any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if typ == EventLog {
		r.lines = append(r.lines, data.(map[string]any)["lines"].([]string)...)
		if got := strings.Join(data.(map[string]any)["lines"].([]string), "\n"); got != msg {
			panic("the message is not the lines: " + msg)
		}
	}
}

// A build log sends every line, in order, as events (the unfinished last
// line at a flush), cuts very long lines, and keeps the whole output in
// object storage when closed.
func TestBuildLog(t *testing.T) {
	ctx := context.Background()
	objs, err := objstore.NewDir(t.TempDir())
	require.NoError(t, err)
	b := New(Deps{Objects: objs, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ev := &recorder{}
	l := b.newLog(ctx, ev, "t1", "op-1")
	l.step("apt-get install -y -- tree")
	var want []string
	for i := range 200 {
		line := strings.Repeat("x", i%7) + " line"
		want = append(want, line)
		_, _ = l.Write([]byte(line + "\n"))
	}
	_, _ = l.Write([]byte("no newline yet"))
	l.flush(ctx)
	_, _ = l.Write([]byte(strings.Repeat("y", maxLogLine+10) + "\r\n"))
	l.close()

	require.Len(t, ev.lines, 203)
	assert.Equal(t, "+ apt-get install -y -- tree", ev.lines[0])
	assert.Equal(t, want, ev.lines[1:201], "every line, in order")
	assert.Equal(t, "no newline yet", ev.lines[201])
	assert.Equal(t, strings.Repeat("y", maxLogLine)+"...", ev.lines[202], "a long line is cut")

	rc, err := objs.Get(ctx, LogKey("t1", "op-1"))
	require.NoError(t, err)
	defer rc.Close()
	kept, err := io.ReadAll(rc)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(kept), "+ apt-get install -y -- tree\n line\nx line\n"))
	assert.Contains(t, string(kept), "no newline yet"+strings.Repeat("y", maxLogLine+10), "the kept log is the output as written")
}
