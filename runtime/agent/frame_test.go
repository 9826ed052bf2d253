package agent

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFrameRoundTrip(t *testing.T) {
	t.Parallel()
	var b []byte
	b = appendFrame(b, typeHello, 0, []byte(`{"version":1,"pid":7}`))
	b = appendFrame(b, typeStdout, 3, bytes.Repeat([]byte{'x'}, MaxFrame))
	b = appendFrame(b, typeStdinEOF, 4, nil)
	for _, reuse := range []bool{false, true} {
		fr := &frameReader{r: bytes.NewReader(b), reuse: reuse}
		f, err := fr.next()
		require.NoError(t, err)
		assert.Equal(t, frame{typeHello, 0, []byte(`{"version":1,"pid":7}`)}, f)
		f, err = fr.next()
		require.NoError(t, err)
		assert.Equal(t, typeStdout, f.typ)
		assert.Equal(t, uint32(3), f.id)
		assert.Len(t, f.payload, MaxFrame)
		f, err = fr.next()
		require.NoError(t, err)
		assert.Equal(t, frame{typeStdinEOF, 4, nil}, f)
		_, err = fr.next()
		assert.Equal(t, io.EOF, err)
	}
}

func TestFrameReaderErrors(t *testing.T) {
	t.Parallel()
	oversized := appendFrame(nil, typeStdout, 1, nil)
	binary.BigEndian.PutUint32(oversized[5:], MaxFrame+1)
	huge := appendFrame(nil, typeStdout, 1, nil)
	binary.BigEndian.PutUint32(huge[5:], 1<<32-1)
	for _, tc := range []struct {
		name  string
		input []byte
		want  error
	}{
		{"header cut", []byte{typeStdout, 0, 0}, io.ErrUnexpectedEOF},
		{"payload cut", appendFrame(nil, typeStdout, 1, []byte("abc"))[:headerLen+2], io.ErrUnexpectedEOF},
		{"payload missing", appendFrame(nil, typeStdout, 1, []byte("abc"))[:headerLen], io.ErrUnexpectedEOF},
		{"one more than MaxFrame", oversized, errFrameTooLarge},
		{"4 GiB", huge, errFrameTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fr := &frameReader{r: bytes.NewReader(tc.input)}
			_, err := fr.next()
			assert.True(t, errors.Is(err, tc.want), "got %v, want %v", err, tc.want)
		})
	}
}

// FuzzReadFrame reads frames from arbitrary bytes until an error: it must
// not panic, and no frame may make it allocate more than MaxFrame.
func FuzzReadFrame(f *testing.F) {
	f.Add(appendFrame(nil, typeHello, 0, []byte(`{"version":1,"pid":1}`)))
	f.Add(appendFrame(appendFrame(nil, typeStdout, 1, []byte("out\n")), typeExit, 1, []byte(`{"code":0}`)))
	f.Add(appendFrame(nil, typeStartFailed, 9, []byte(`{"code":127,"message":"x: executable file not found in $PATH","process":false}`)))
	f.Add(appendFrame(nil, typeStdinAck, 2, []byte{0, 0, 1, 0}))
	f.Add([]byte{typeStdout, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, reuse := range []bool{false, true} {
			fr := &frameReader{r: bytes.NewReader(data), reuse: reuse}
			for {
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				f, err := fr.next()
				runtime.ReadMemStats(&after)
				// Slack for allocations by the fuzzing machinery meanwhile.
				if grew := after.TotalAlloc - before.TotalAlloc; grew > 2*MaxFrame {
					t.Fatalf("reading a frame allocated %d bytes", grew)
				}
				if err != nil {
					break
				}
				if len(f.payload) > MaxFrame {
					t.Fatalf("payload of %d bytes", len(f.payload))
				}
			}
		}
	})
}
