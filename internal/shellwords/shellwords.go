// Package shellwords splits a command line into words as a POSIX shell
// does (quotes and backslashes, no expansion), and joins words back into a
// line a shell splits the same way.
package shellwords

import (
	"errors"
	"strings"
)

// Split splits s into words as a POSIX shell does without expanding
// anything: blanks separate words; 'single quotes' keep everything
// literally; "double quotes" keep everything but \" \\ \$ \` and
// backslash-newline; an unquoted backslash keeps the next character.
// $, `, globs, ~, ;, | and redirections are ordinary characters: the words
// are an argv, never run by a shell (use ["sh", "-c", script] for that).
// It fails on an unterminated quote or a trailing backslash.
func Split(s string) ([]string, error) {
	var (
		words []string
		cur   strings.Builder
		in    bool // inside a word (an empty quoted word counts)
	)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		case c == '\\':
			if i+1 >= len(s) {
				return nil, errors.New("a trailing backslash")
			}
			i++
			if s[i] != '\n' {
				cur.WriteByte(s[i])
				in = true
			}
		case c == '\'':
			end := strings.IndexByte(s[i+1:], '\'')
			if end < 0 {
				return nil, errors.New("an unterminated single quote")
			}
			cur.WriteString(s[i+1 : i+1+end])
			i += end + 1
			in = true
		case c == '"':
			in = true
			i++
			for ; ; i++ {
				if i >= len(s) {
					return nil, errors.New("an unterminated double quote")
				}
				if s[i] == '"' {
					break
				}
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("\"\\$`\n", s[i+1]) >= 0 {
					i++
					if s[i] != '\n' {
						cur.WriteByte(s[i])
					}
					continue
				}
				cur.WriteByte(s[i])
			}
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if in {
		words = append(words, cur.String())
	}
	return words, nil
}

// Join quotes each word that needs it for a shell (in single quotes, a
// single quote closed, escaped and reopened) and joins them with spaces:
// Split(Join(w)) == w.
func Join(words []string) string {
	out := make([]string, len(words))
	for i, w := range words {
		out[i] = Quote(w)
	}
	return strings.Join(out, " ")
}

// Quote returns w as one shell word.
func Quote(w string) string {
	if w == "" {
		return "''"
	}
	safe := true
	for _, c := range w {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_./=:,+@%", c)) {
			safe = false
			break
		}
	}
	if safe {
		return w
	}
	return "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
}
