package builder

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/names"
	"github.com/envd-dev/envd/errdefs"
)

// A build's output (its steps' stdout and stderr, a header line per step)
// is its log: sent as it comes as the operation's events of type
// EventLog, batched, and kept whole in object storage under LogKey when
// the build ends, whatever the outcome.
const (
	// EventLog is the event type of output lines; its data is
	// {"lines": [...]}, its message the lines joined by newlines.
	EventLog = "log"
	// logBatchLines and logBatchEvery bound how long a line waits before
	// it is sent: a batch goes out when it is this long or this old.
	logBatchLines = 50
	logBatchEvery = 500 * time.Millisecond
	// maxLogLine cuts very long lines (a progress bar redrawn without a
	// newline); maxLogBytes bounds a kept log and maxLogEventLines the
	// lines sent as events (the rest is in the kept log).
	maxLogLine       = 4096
	maxLogBytes      = 32 << 20
	maxLogEventLines = 20000
)

// LogKey is where the log of operation opID of tenant is kept.
func LogKey(tenant, opID string) string { return "logs/" + tenant + "/operations/" + opID + ".log" }

// buildLog is a build's log being written. Write is safe from the two
// output streams at once.
type buildLog struct {
	ctx     context.Context
	ev      Events
	b       *Builder
	key     string
	sendMu  sync.Mutex // one send at a time: events keep the lines' order
	mu      sync.Mutex
	file    *os.File // the whole log, stored at close; nil without object storage
	size    int64
	cut     bool
	partial []byte
	pending []string
	sent    int
	stop    chan struct{}
	done    chan struct{}
}

// newLog starts the log of operation opID.
func (b *Builder) newLog(ctx context.Context, ev Events, tenant, opID string) *buildLog {
	l := &buildLog{ctx: ctx, ev: ev, b: b, key: LogKey(tenant, opID), stop: make(chan struct{}), done: make(chan struct{})}
	if b.d.Objects != nil {
		f, err := os.CreateTemp("", "envd-build-log-")
		if err != nil {
			b.d.Log.Warn("build log file", "op", opID, "err", err)
		} else {
			_ = os.Remove(f.Name()) // open until close
			l.file = f
		}
	}
	go func() {
		defer close(l.done)
		t := time.NewTicker(logBatchEvery)
		defer t.Stop()
		for {
			select {
			case <-l.stop:
				return
			case <-t.C:
				l.send(ctx)
			}
		}
	}()
	return l
}

// step writes a step's header line.
func (l *buildLog) step(name string) {
	l.flush(l.ctx)
	_, _ = l.Write([]byte("+ " + name + "\n"))
}

func (l *buildLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.file != nil && !l.cut {
		if l.size+int64(len(p)) > maxLogBytes {
			l.cut = true
			_, _ = l.file.WriteString("\n[envd: the log is cut here, at its limit]\n")
		} else {
			n, _ := l.file.Write(p)
			l.size += int64(n)
		}
	}
	data := append(l.partial, p...)
	for {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			break
		}
		l.addLine(data[:i])
		data = data[i+1:]
	}
	if len(data) > maxLogLine {
		l.addLine(data)
		data = nil
	}
	l.partial = append([]byte(nil), data...)
	return len(p), nil
}

func (l *buildLog) addLine(b []byte) {
	line := strings.TrimSuffix(string(b), "\r")
	if len(line) > maxLogLine {
		line = line[:maxLogLine] + "..."
	}
	l.pending = append(l.pending, line)
}

// flush sends every line written so far, the last unfinished one too.
func (l *buildLog) flush(ctx context.Context) {
	l.mu.Lock()
	if len(l.partial) > 0 {
		l.addLine(l.partial)
		l.partial = nil
	}
	l.mu.Unlock()
	l.send(ctx)
}

// send sends the pending lines, in events of at most logBatchLines.
func (l *buildLog) send(ctx context.Context) {
	l.sendMu.Lock()
	defer l.sendMu.Unlock()
	l.mu.Lock()
	lines := l.pending
	if len(lines) == 0 {
		l.mu.Unlock()
		return
	}
	l.pending = nil
	room := maxLogEventLines - l.sent
	if room <= 0 {
		l.mu.Unlock()
		return
	}
	if len(lines) > room {
		lines = append(lines[:room:room], "[envd: further lines are only in the kept log: envctl op logs]")
	}
	l.sent += len(lines)
	l.mu.Unlock()
	for len(lines) > 0 {
		n := min(len(lines), logBatchLines)
		l.ev.Event(ctx, EventLog, strings.Join(lines[:n], "\n"), map[string]any{"lines": lines[:n]})
		lines = lines[n:]
	}
}

// close sends what is left and keeps the whole log in object storage.
func (l *buildLog) close() {
	close(l.stop)
	<-l.done
	ctx, cancel := context.WithTimeout(context.WithoutCancel(l.ctx), time.Minute)
	defer cancel()
	l.flush(ctx)
	if l.file == nil {
		return
	}
	defer l.file.Close()
	l.mu.Lock()
	size := l.size
	if l.cut {
		size, _ = l.file.Seek(0, io.SeekCurrent)
	}
	l.mu.Unlock()
	if _, err := l.file.Seek(0, io.SeekStart); err != nil {
		return
	}
	if err := l.b.d.Objects.Put(ctx, l.key, io.LimitReader(l.file, size), size); err != nil {
		l.b.d.Log.Warn("keep build log", "key", l.key, "err", err)
	}
}

// Build contexts: a tar uploaded before a build, whose regular files a
// spec's files name as their source. Kept by digest per project.

// MaxContextBytes bounds an uploaded build context.
const MaxContextBytes = 256 << 20

func contextKey(tenant, project, digest string) string {
	return "build-contexts/" + tenant + "/" + project + "/" + strings.TrimPrefix(digest, "sha256:") + ".tar"
}

// UploadContext keeps the tar r as a build context of project and answers
// its digest, which a build's spec names as its context.
func (b *Builder) UploadContext(ctx context.Context, p types.Principal, project string, r io.Reader) (types.BuildContext, error) {
	if err := names.Validate("project", project); err != nil {
		return types.BuildContext{}, err
	}
	if _, err := b.d.Store.GetProject(ctx, p.Tenant, project); err != nil {
		return types.BuildContext{}, err
	}
	if b.d.Objects == nil {
		return types.BuildContext{}, fmt.Errorf("this node has no object storage for build contexts: %w", errdefs.ErrFailedPrecondition)
	}
	f, err := os.CreateTemp("", "envd-build-context-")
	if err != nil {
		return types.BuildContext{}, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(r, MaxContextBytes+1))
	if err != nil {
		return types.BuildContext{}, fmt.Errorf("read build context: %w", err)
	}
	if n > MaxContextBytes {
		return types.BuildContext{}, fmt.Errorf("build context larger than %d bytes: %w", MaxContextBytes, errdefs.ErrInvalidArgument)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return types.BuildContext{}, err
	}
	files := 0
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return types.BuildContext{}, fmt.Errorf("build context: not a tar: %v: %w", err, errdefs.ErrInvalidArgument)
		}
		if hdr.Typeflag == tar.TypeReg {
			files++
		}
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return types.BuildContext{}, err
	}
	digest := "sha256:" + hex.EncodeToString(h.Sum(nil))
	if err := b.d.Objects.Put(ctx, contextKey(p.Tenant, project, digest), f, n); err != nil {
		return types.BuildContext{}, fmt.Errorf("keep build context: %w", err)
	}
	return types.BuildContext{Context: digest, SizeBytes: n, Files: files}, nil
}

// checkContext refuses a build naming a context the project does not have.
func (b *Builder) checkContext(ctx context.Context, tenant, project, digest string) error {
	if digest == "" {
		return nil
	}
	if b.d.Objects == nil {
		return fmt.Errorf("this node has no object storage for build contexts: %w", errdefs.ErrFailedPrecondition)
	}
	rc, err := b.d.Objects.Get(ctx, contextKey(tenant, project, digest))
	if err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			return fmt.Errorf("build context %s of project %q (upload it first): %w", digest, project, errdefs.ErrNotFound)
		}
		return err
	}
	return rc.Close()
}

// contextReader reads regular files of a build context by name; nil when
// the build has none.
func (b *Builder) contextReader(ctx context.Context, tenant, project, digest string) func(string) ([]byte, error) {
	if digest == "" || b.d.Objects == nil {
		return nil
	}
	return func(name string) ([]byte, error) {
		rc, err := b.d.Objects.Get(ctx, contextKey(tenant, project, digest))
		if err != nil {
			return nil, fmt.Errorf("build context %s: %w", digest, err)
		}
		defer rc.Close()
		tr := tar.NewReader(rc)
		for {
			hdr, err := tr.Next()
			if errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("%q is not a file of build context %s: %w", name, digest, errdefs.ErrInvalidArgument)
			}
			if err != nil {
				return nil, fmt.Errorf("build context %s: %w", digest, err)
			}
			if strings.TrimPrefix(strings.TrimSuffix(hdr.Name, "/"), "./") != name {
				continue
			}
			if hdr.Typeflag != tar.TypeReg {
				return nil, fmt.Errorf("%q of build context %s is not a regular file: %w", name, digest, errdefs.ErrInvalidArgument)
			}
			if hdr.Size > MaxContextFileBytes {
				return nil, fmt.Errorf("%q of build context %s: larger than %d bytes: %w", name, digest, MaxContextFileBytes, errdefs.ErrInvalidArgument)
			}
			return io.ReadAll(tr)
		}
	}
}
