package envd

import (
	"fmt"
	"time"

	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/internal/proc"
)

// The Go runtime aborts the whole process when it needs an OS thread past
// debug.SetMaxThreads' limit (10000 unless the node sets another). Work
// that can pin threads (system calls that block: a hung FUSE read, a
// namespace entered on a locked thread) is admitted only while the process
// holds fewer threads than a high-water mark well below that limit, so
// that a tenant who makes threads pile up gets 429s, not a crash of the
// node for everyone; work already running goes on.

// DefaultThreadHighWater is the default Config.ThreadHighWater: half the
// runtime's default limit of 10000 threads.
const DefaultThreadHighWater = 5000

// threadsRetryAfter is what a refused client is told to wait.
const threadsRetryAfter = 5 * time.Second

// admitThreads refuses new work while the process runs more OS threads
// than the high-water mark.
func (s *Service) admitThreads() error {
	hw := s.cfg.ThreadHighWater
	if hw == 0 {
		hw = DefaultThreadHighWater
	}
	if hw < 0 {
		return nil
	}
	n, err := proc.Threads()
	if err != nil || n <= hw {
		return nil // a process without /proc cannot tell: admit
	}
	return &ThreadsExhaustedError{Threads: n, HighWater: hw}
}

// ThreadsExhaustedError is a refusal by the thread guard.
type ThreadsExhaustedError struct {
	Threads, HighWater int
}

func (e *ThreadsExhaustedError) Error() string {
	return fmt.Sprintf("this node runs %d OS threads, past its high-water mark of %d: no new work until some ends: %v",
		e.Threads, e.HighWater, errdefs.ErrResourceExhausted)
}

func (e *ThreadsExhaustedError) Unwrap() error { return errdefs.ErrResourceExhausted }

// RetryAfter is the suggested wait.
func (e *ThreadsExhaustedError) RetryAfter() time.Duration { return threadsRetryAfter }

// Details are the error body's machine-readable numbers: kind "threads".
func (e *ThreadsExhaustedError) Details() map[string]any {
	return map[string]any{"kind": "threads", "limit": e.HighWater, "retry_after_seconds": int(threadsRetryAfter.Seconds())}
}
