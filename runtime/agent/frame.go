package agent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Version is the protocol version the agent announces in Hello and the host
// requires.
const Version = 1

// MaxFrame is the largest payload of a frame.
const MaxFrame = 64 << 10

const (
	typeHello       byte = 1
	typeStart       byte = 2
	typeStdin       byte = 3
	typeStdinEOF    byte = 4
	typeKill        byte = 5
	typeStarted     byte = 6
	typeStartFailed byte = 7
	typeStdout      byte = 8
	typeStderr      byte = 9
	typeExit        byte = 10
	typeStdinAck    byte = 11
)

const (
	headerLen = 9
	// dataChunk is the largest payload of a Stdin, Stdout or Stderr frame.
	dataChunk = 32 << 10
	// stdinWindow is how much stdin the host sends ahead of the agent's
	// StdinAck frames.
	stdinWindow = 128 << 10
)

var errFrameTooLarge = errors.New("frame too large")

// frame is one frame read; payload belongs to the frameReader if it reuses
// its buffer (valid until the next read), else to the caller.
type frame struct {
	typ     byte
	id      uint32
	payload []byte
}

// frameReader reads frames from r. It never allocates more than MaxFrame for
// a payload, whatever length a header claims.
type frameReader struct {
	r   io.Reader
	hdr [headerLen]byte
	// reuse: payloads share one buffer, grown to the largest payload seen;
	// otherwise each payload is a slice from alloc (make if nil) that the
	// caller may keep.
	reuse bool
	buf   []byte
	alloc func(n int) []byte
}

// next reads a frame. It returns io.EOF if r ends cleanly between frames,
// io.ErrUnexpectedEOF if it ends inside one, and an error wrapping
// errFrameTooLarge for a payload longer than MaxFrame (without reading it).
func (fr *frameReader) next() (frame, error) {
	if _, err := io.ReadFull(fr.r, fr.hdr[:]); err != nil {
		return frame{}, err
	}
	f := frame{typ: fr.hdr[0], id: binary.BigEndian.Uint32(fr.hdr[1:5])}
	n := binary.BigEndian.Uint32(fr.hdr[5:9])
	if n > MaxFrame {
		return frame{}, fmt.Errorf("frame type %d of %d bytes, more than %d: %w", f.typ, n, MaxFrame, errFrameTooLarge)
	}
	if n == 0 {
		return f, nil
	}
	var p []byte
	if fr.reuse {
		if cap(fr.buf) < int(n) {
			fr.buf = make([]byte, n)
		}
		p = fr.buf[:n]
	} else if fr.alloc != nil {
		p = fr.alloc(int(n))
	} else {
		p = make([]byte, n)
	}
	if _, err := io.ReadFull(fr.r, p); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return frame{}, err
	}
	f.payload = p
	return f, nil
}

// putHeader fills the header of a frame whose payload already follows it
// in b (len(b) = headerLen + payload length).
func putHeader(b []byte, typ byte, id uint32) {
	b[0] = typ
	binary.BigEndian.PutUint32(b[1:5], id)
	binary.BigEndian.PutUint32(b[5:9], uint32(len(b)-headerLen))
}

// appendFrame appends a whole frame to b.
func appendFrame(b []byte, typ byte, id uint32, payload []byte) []byte {
	b = append(b, typ, 0, 0, 0, 0, 0, 0, 0, 0)
	binary.BigEndian.PutUint32(b[len(b)-8:], id)
	binary.BigEndian.PutUint32(b[len(b)-4:], uint32(len(payload)))
	return append(b, payload...)
}

type helloMsg struct {
	Version int `json:"version"`
	PID     int `json:"pid"`
}

type startMsg struct {
	Args  []string `json:"args"`
	Env   []string `json:"env"`
	Cwd   string   `json:"cwd"`
	Stdin bool     `json:"stdin"`
}

type startFailedMsg struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Process bool   `json:"process"`
}

type exitMsg struct {
	Code int `json:"code"`
}
