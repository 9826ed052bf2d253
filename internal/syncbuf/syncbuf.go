// Package syncbuf is a bytes.Buffer that one goroutine may write while
// another reads it (process output copied by a runtime goroutine, read by a
// test or a progress line).
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer is safe for concurrent Write and reads. The zero value is ready.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns a copy of the contents.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Bytes returns a copy of the contents.
func (b *Buffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}
