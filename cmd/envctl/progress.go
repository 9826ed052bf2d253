package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/term"

	"github.com/envd-dev/envd/api/types"
)

// progress shows work in progress on stderr, never on stdout (so it never
// mixes into -o json, yaml or name output): on a terminal one line that
// updates in place, with a bar when a total is known; otherwise a plain
// line per phase.
//
// An operation's event is drawn with sizes when its data carries them:
// "bytes" (done so far, or the size of what the phase made), optionally
// "total_bytes" (the whole), and "layer_bytes" (the encoded layer of a
// save, pushed next). A server that reports a long transfer (an upload, a
// lazy fetch) in steps gets a moving bar from the same fields. A save's
// "pushed" event carries no size: it is shown with the size of the layer
// the "encoded" event before it reported, which is what was pushed.
type progress struct {
	mu    sync.Mutex
	w     io.Writer
	tty   bool
	used  bool
	layer int64 // the last event's layer_bytes
	width int   // the terminal's columns; 0 when unknown
}

func (a *app) newProgress() *progress {
	p := &progress{w: a.stderr, tty: isTTY(a.stderr)}
	if p.tty {
		if w, _, err := term.GetSize(int(a.stderr.(*os.File).Fd())); err == nil {
			p.width = w
		}
	}
	return p
}

// fit cuts line to the terminal's width: a line that wraps cannot be
// redrawn in place.
func (p *progress) fit(line string) string {
	if p.width <= 1 {
		return line
	}
	r := []rune(line)
	if len(r) < p.width {
		return line
	}
	return string(r[:p.width-1])
}

// isTTY says whether w is a terminal (not merely a character device such
// as /dev/null).
func isTTY(w any) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// eventSizes returns the byte counts an event's data carries.
func eventSizes(data json.RawMessage) (done, total int64, ok bool) {
	if len(data) == 0 {
		return 0, 0, false
	}
	var d struct {
		Bytes      *int64 `json:"bytes"`
		TotalBytes *int64 `json:"total_bytes"`
		LayerBytes *int64 `json:"layer_bytes"`
	}
	if json.Unmarshal(data, &d) != nil {
		return 0, 0, false
	}
	switch {
	case d.Bytes != nil:
		done, ok = *d.Bytes, true
	case d.LayerBytes != nil:
		done, ok = *d.LayerBytes, true
	}
	if d.TotalBytes != nil {
		total = *d.TotalBytes
	}
	return done, total, ok
}

func (p *progress) event(ev types.Event) {
	if ev.Type == "log" { // a build's output lines, shown as they are
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.tty && p.used {
			fmt.Fprint(p.w, "\r\033[K")
		}
		fmt.Fprintf(p.w, "%s\n", ev.Message)
		return
	}
	msg := strings.ReplaceAll(ev.Message, "\n", " ")
	done, total, sized := eventSizes(ev.Data)
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case sized && ev.Type == "encoded":
		p.layer = done
	case !sized && ev.Type == "pushed" && p.layer > 0:
		done, sized = p.layer, true
	}
	if p.tty {
		line := fmt.Sprintf("%s: %s", ev.Type, msg)
		if sized {
			line = fmt.Sprintf("%s %s: %s", ev.Type, bar(done, total), msg)
		}
		fmt.Fprintf(p.w, "\r\033[K%s", p.fit(line))
		p.used = true
		return
	}
	if sized {
		fmt.Fprintf(p.w, "%s: %s [%s]\n", ev.Type, msg, sizes(done, total))
		return
	}
	fmt.Fprintf(p.w, "%s: %s\n", ev.Type, msg)
}

// done ends the progress line.
func (p *progress) done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty && p.used {
		fmt.Fprint(p.w, "\r\033[K")
		p.used = false
	}
}

// sizes is "DONE" or "DONE of TOTAL".
func sizes(done, total int64) string {
	if total <= 0 {
		return formatBytes(done)
	}
	return formatBytes(done) + " of " + formatBytes(total)
}

const barWidth = 24

// bar draws done of total; without a total, only the size.
func bar(done, total int64) string {
	if total <= 0 {
		return formatBytes(done)
	}
	frac := min(float64(done)/float64(total), 1)
	n := int(frac * barWidth)
	return fmt.Sprintf("[%s%s] %s / %s %3d%%", strings.Repeat("=", n), strings.Repeat(" ", barWidth-n),
		formatBytes(done), formatBytes(total), int(frac*100))
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r   io.Reader
	n   atomic.Int64
	eof atomic.Bool
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	if err == io.EOF {
		c.eof.Store(true)
	}
	return n, err
}

// uploadRedraw is how often a terminal's upload line is redrawn.
const uploadRedraw = 200 * time.Millisecond

// upload shows the bytes read from r, an upload of what (total bytes, 0
// when unknown). It returns the reader to send and a function to call when
// the request is over.
func (p *progress) upload(r io.Reader, what string, total int64) (io.Reader, func()) {
	cr := &countingReader{r: r}
	start := time.Now()
	if !p.tty {
		size := "size unknown"
		if total > 0 {
			size = formatBytes(total)
		}
		fmt.Fprintf(p.w, "upload: sending %s (%s)\n", what, size)
		return cr, func() {
			if cr.eof.Load() {
				fmt.Fprintf(p.w, "upload: sent %s in %s\n", formatBytes(cr.n.Load()), time.Since(start).Round(time.Millisecond))
			}
		}
	}
	draw := func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		fmt.Fprintf(p.w, "\r\033[K%s", p.fit("upload "+bar(cr.n.Load(), total)))
		p.used = true
	}
	draw()
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(uploadRedraw)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				draw()
			}
		}
	}()
	return cr, func() {
		close(stop)
		<-stopped
		draw()
		p.done()
	}
}
