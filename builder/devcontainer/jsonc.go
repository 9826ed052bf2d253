package devcontainer

import (
	"fmt"

	"github.com/envd-dev/envd/errdefs"
)

// standardize turns JSON with comments (// and /* */) and trailing commas,
// as devcontainer.json allows, into plain JSON: comments become spaces
// (so byte offsets in errors stay those of the file) and a comma followed
// only by space or comments before '}' or ']' is dropped. Strings are kept
// as they are, escapes included.
func standardize(in []byte) ([]byte, error) {
	out := make([]byte, len(in))
	copy(out, in)
	lastComma := -1 // offset of a comma not yet followed by a value
	for i := 0; i < len(out); i++ {
		c := out[i]
		switch {
		case c == '"':
			lastComma = -1
			i++
			for ; i < len(out) && out[i] != '"'; i++ {
				if out[i] == '\\' {
					i++
				}
			}
			if i >= len(out) {
				return nil, fmt.Errorf("devcontainer.json: a string is not closed: %w", errdefs.ErrInvalidArgument)
			}
		case c == '/' && i+1 < len(out) && out[i+1] == '/':
			for ; i < len(out) && out[i] != '\n'; i++ {
				out[i] = ' '
			}
		case c == '/' && i+1 < len(out) && out[i+1] == '*':
			start := i
			i += 2
			for ; i+1 < len(out) && !(out[i] == '*' && out[i+1] == '/'); i++ {
			}
			if i+1 >= len(out) {
				return nil, fmt.Errorf("devcontainer.json: a comment at byte %d is not closed: %w", start, errdefs.ErrInvalidArgument)
			}
			for j := start; j <= i+1; j++ {
				if out[j] != '\n' {
					out[j] = ' '
				}
			}
			i++
		case c == ',':
			lastComma = i
		case c == '}' || c == ']':
			if lastComma >= 0 {
				out[lastComma] = ' '
			}
			lastComma = -1
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
		default:
			lastComma = -1
		}
	}
	return out, nil
}
