package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// -o yaml prints the same value -o json does, as YAML: the value is encoded
// to JSON first (so field names, omitempty and custom marshalers are the
// JSON ones), read back keeping the order of object keys (struct field
// order; sorted keys for Go maps), and written as block YAML. Strings are
// quoted whenever a YAML 1.1 or 1.2 reader could take them for anything
// but a string.

// yamlMap is a JSON object with its keys in order.
type yamlMap []yamlPair

type yamlPair struct {
	key   string
	value any
}

// writeYAML writes v as a YAML document.
func writeYAML(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	node, err := readJSONValue(dec)
	if err != nil {
		return fmt.Errorf("yaml: %w", err)
	}
	var sb strings.Builder
	switch n := node.(type) {
	case yamlMap:
		if len(n) == 0 {
			sb.WriteString("{}\n")
		} else {
			writeYAMLMap(&sb, n, 0)
		}
	case []any:
		if len(n) == 0 {
			sb.WriteString("[]\n")
		} else {
			writeYAMLList(&sb, n, 0)
		}
	default:
		sb.WriteString(yamlScalar(n))
		sb.WriteByte('\n')
	}
	_, err = io.WriteString(w, sb.String())
	return err
}

// readJSONValue reads one JSON value: yamlMap, []any, string, json.Number,
// bool or nil.
func readJSONValue(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			m := yamlMap{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				v, err := readJSONValue(dec)
				if err != nil {
					return nil, err
				}
				m = append(m, yamlPair{kt.(string), v})
			}
			_, err := dec.Token() // '}'
			return m, err
		case '[':
			l := []any{}
			for dec.More() {
				v, err := readJSONValue(dec)
				if err != nil {
					return nil, err
				}
				l = append(l, v)
			}
			_, err := dec.Token() // ']'
			return l, err
		}
		return nil, fmt.Errorf("unexpected %v", t)
	default:
		return t, nil
	}
}

func indent(sb *strings.Builder, n int) {
	sb.WriteString(strings.Repeat("  ", n))
}

// writeYAMLMap writes a non-empty map at depth; the caller has written
// the indentation of the first line (for a map inside a list item).
func writeYAMLMap(sb *strings.Builder, m yamlMap, depth int) {
	for i, p := range m {
		if i > 0 {
			indent(sb, depth)
		}
		sb.WriteString(yamlScalar(p.key))
		sb.WriteByte(':')
		writeYAMLChild(sb, p.value, depth)
	}
}

// writeYAMLList writes a non-empty list at depth, like writeYAMLMap.
func writeYAMLList(sb *strings.Builder, l []any, depth int) {
	for i, v := range l {
		if i > 0 {
			indent(sb, depth)
		}
		sb.WriteString("- ")
		switch c := v.(type) {
		case yamlMap:
			if len(c) == 0 {
				sb.WriteString("{}\n")
			} else {
				writeYAMLMap(sb, c, depth+1)
			}
		case []any:
			if len(c) == 0 {
				sb.WriteString("[]\n")
			} else {
				writeYAMLList(sb, c, depth+1)
			}
		default:
			sb.WriteString(yamlScalar(c))
			sb.WriteByte('\n')
		}
	}
}

// writeYAMLChild writes the value of a map key, after "key:".
func writeYAMLChild(sb *strings.Builder, v any, depth int) {
	switch c := v.(type) {
	case yamlMap:
		if len(c) == 0 {
			sb.WriteString(" {}\n")
			return
		}
		sb.WriteByte('\n')
		indent(sb, depth+1)
		writeYAMLMap(sb, c, depth+1)
	case []any:
		if len(c) == 0 {
			sb.WriteString(" []\n")
			return
		}
		// A list under a key is indented too: the form every reader takes.
		sb.WriteByte('\n')
		indent(sb, depth+1)
		writeYAMLList(sb, c, depth+1)
	default:
		sb.WriteByte(' ')
		sb.WriteString(yamlScalar(c))
		sb.WriteByte('\n')
	}
}

// yamlScalar renders a JSON scalar.
func yamlScalar(v any) string {
	switch s := v.(type) {
	case nil:
		return "null"
	case bool:
		return strconv.FormatBool(s)
	case json.Number:
		return s.String()
	case string:
		if plainSafe(s) {
			return s
		}
		// strconv.Quote's escapes (\n, \t, \", \\, \a, \b, \f, \r, \v,
		// \xNN, \uNNNN, \UNNNNNNNN) are all YAML double-quoted escapes, and
		// a JSON string is valid UTF-8, so \xNN only stands for U+00NN.
		return strconv.Quote(s)
	}
	return strconv.Quote(fmt.Sprint(v))
}

// yamlWords are plain scalars some YAML reader takes for a bool or null.
var yamlWords = map[string]bool{
	"true": true, "false": true, "yes": true, "no": true, "on": true, "off": true,
	"y": true, "n": true, "null": true, "~": true,
}

// plainSafe says whether s can be written unquoted and reads back as the
// same string under YAML 1.1 and 1.2. It is strict on purpose: it starts
// with a letter, '/' or '_' (never a number, date or indicator), has only
// letters, digits, spaces and "_./@+-:", and none of ": ", " #", a
// trailing ':' or space.
func plainSafe(s string) bool {
	if s == "" || yamlWords[strings.ToLower(s)] {
		return false
	}
	c := s[0]
	if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '/' || c == '_') {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("_./@+-: ", c) >= 0:
		default:
			return false
		}
	}
	return !strings.Contains(s, ": ") && !strings.Contains(s, " #") &&
		!strings.HasSuffix(s, ":") && !strings.HasSuffix(s, " ")
}
