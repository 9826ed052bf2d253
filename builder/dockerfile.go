package builder

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/builder/buildkit"
	"github.com/envd-dev/envd/errdefs"
)

// Dockerfile builds are run by BuildKit (builder/buildkit); envd reads a
// Dockerfile only to refuse what cannot work before an operation starts (an
// unknown instruction, no FROM) and to find the images it names, which
// must be images of the node's registry: no registry outside is reached.

// MaxDockerfileBytes bounds a Dockerfile in a build request.
const MaxDockerfileBytes = 1 << 20

// dockerfileInstructions are the Dockerfile's instructions.
var dockerfileInstructions = map[string]bool{
	"FROM": true, "RUN": true, "CMD": true, "LABEL": true, "MAINTAINER": true, "EXPOSE": true, "ENV": true,
	"ADD": true, "COPY": true, "ENTRYPOINT": true, "VOLUME": true, "USER": true, "WORKDIR": true, "ARG": true,
	"ONBUILD": true, "STOPSIGNAL": true, "HEALTHCHECK": true, "SHELL": true,
}

var (
	argName     = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	heredocMark = regexp.MustCompile(`<<-?\s*["']?([A-Za-z_][A-Za-z0-9_]*)["']?`)
	escapeDir   = regexp.MustCompile(`^#\s*escape\s*=\s*(\S)\s*$`)
)

// checkDockerfile checks a build request's Dockerfile part.
func checkDockerfile(req types.BuildRequest) error {
	d := req.Dockerfile
	if len(req.Packages) > 0 || req.Manager != "" || req.Sources != nil || len(req.Files) > 0 || len(req.Env) > 0 || len(req.Run) > 0 {
		return invalid("dockerfile: a build is a Dockerfile or envd's spec (manager, packages, sources, files, env, run), not both")
	}
	if req.From != 0 {
		return invalid("dockerfile: from: a Dockerfile build starts from its FROM images, not from a version")
	}
	if strings.TrimSpace(d.Content) == "" {
		return invalid("dockerfile: content: required")
	}
	if len(d.Content) > MaxDockerfileBytes {
		return fmt.Errorf("dockerfile: larger than %d bytes: %w", MaxDockerfileBytes, errdefs.ErrInvalidArgument)
	}
	for k := range d.Args {
		if !argName.MatchString(k) {
			return invalid("dockerfile: args: %q is not a build argument name", k)
		}
		if slices.Contains(buildkit.ReservedArgs, k) {
			return invalid("dockerfile: args: %s is set by envd", k)
		}
	}
	if d.Target != "" && !stageName.MatchString(d.Target) {
		return invalid("dockerfile: target: %q is not a stage name", d.Target)
	}
	refs, err := DockerfileImages(d.Content, d.Args)
	if err != nil {
		return err
	}
	if d.Target != "" && !refs.stages[strings.ToLower(d.Target)] {
		return invalid("dockerfile: target: no stage named %q", d.Target)
	}
	return nil
}

var stageName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.-]*$`)

// dockerfileRefs is what DockerfileImages finds.
type dockerfileRefs struct {
	Images []string        // images named, in order of first use
	stages map[string]bool // stage names (lower case)
	// roots are the FROM lines stages descend from (by lower-case stage
	// name); last is the last stage's.
	roots map[string]fromLine
	last  fromLine
}

// fromLine is a FROM instruction naming an image (or scratch).
type fromLine struct {
	Image  string // expanded
	Line   int    // index in the lines of the Dockerfile
	Token  string // as written
	Joined bool   // the instruction continues on the next lines
}

// DockerfileImages reads a Dockerfile's instructions and answers the images
// it names: FROM bases that are neither an earlier stage nor scratch, COPY
// --from= and RUN --mount=from= sources that are not stages. Global ARGs
// (before the first FROM), with args over their defaults, are expanded in
// FROM. An unknown instruction or a Dockerfile without FROM is
// ErrInvalidArgument naming the line.
func DockerfileImages(content string, args map[string]string) (dockerfileRefs, error) {
	refs := dockerfileRefs{stages: map[string]bool{}, roots: map[string]fromLine{}}
	seen := map[string]bool{}
	add := func(img string) {
		if !seen[img] {
			seen[img] = true
			refs.Images = append(refs.Images, img)
		}
	}
	global := map[string]string{}
	froms := 0
	escape := byte('\\')
	lines := strings.Split(strings.ReplaceAll(content, "\r\n", "\n"), "\n")
	directives := true
	for i := 0; i < len(lines); i++ {
		lineNo := i + 1
		raw := strings.TrimSpace(lines[i])
		if directives {
			if m := escapeDir.FindStringSubmatch(strings.ToLower(raw)); m != nil {
				if m[1] != "\\" && m[1] != "`" {
					return refs, invalid("dockerfile: line %d: escape must be \\ or `", lineNo)
				}
				escape = m[1][0]
				continue
			}
			if !strings.HasPrefix(raw, "#") || raw == "" {
				directives = false
			}
		}
		if raw == "" || strings.HasPrefix(raw, "#") {
			continue
		}
		// Join continuation lines; comment lines inside are dropped.
		first := i
		line := raw
		for strings.HasSuffix(line, string(escape)) && i+1 < len(lines) {
			line = strings.TrimSuffix(line, string(escape))
			i++
			next := strings.TrimSpace(lines[i])
			if strings.HasPrefix(next, "#") {
				line += " "
				continue
			}
			line += " " + next
		}
		fields := strings.Fields(line)
		kw := strings.ToUpper(fields[0])
		if !dockerfileInstructions[kw] {
			return refs, invalid("dockerfile: line %d: unknown instruction %q", lineNo, fields[0])
		}
		// Heredoc bodies are data, not instructions.
		if kw != "ONBUILD" {
			for _, m := range heredocMark.FindAllStringSubmatch(line, -1) {
				for i+1 < len(lines) && strings.TrimSpace(lines[i+1]) != m[1] {
					i++
				}
				i++ // the terminator
			}
		}
		switch kw {
		case "ARG":
			if froms > 0 {
				continue
			}
			for _, a := range fields[1:] {
				name, def, hasDef := strings.Cut(a, "=")
				if v, ok := args[name]; ok {
					global[name] = v
				} else if hasDef {
					global[name] = strings.Trim(def, `"'`)
				} else {
					global[name] = ""
				}
			}
		case "FROM":
			froms++
			rest := fields[1:]
			for len(rest) > 0 && strings.HasPrefix(rest[0], "--") {
				rest = rest[1:]
			}
			if len(rest) == 0 {
				return refs, invalid("dockerfile: line %d: FROM names no image", lineNo)
			}
			img := expandArgs(rest[0], global)
			root := fromLine{Image: img, Line: first, Token: rest[0], Joined: i != first}
			if refs.stageBefore(img, rest) {
				root = refs.roots[strings.ToLower(img)]
			}
			if len(rest) >= 3 && strings.EqualFold(rest[1], "AS") {
				refs.stages[strings.ToLower(rest[2])] = true
				refs.roots[strings.ToLower(rest[2])] = root
			}
			refs.last = root
			switch {
			case img == "":
				return refs, invalid("dockerfile: line %d: FROM %s is empty (an ARG without a value?)", lineNo, rest[0])
			case strings.EqualFold(img, "scratch"), refs.stageBefore(img, rest):
			default:
				add(img)
			}
		case "COPY", "RUN":
			for _, f := range fields[1:] {
				if !strings.HasPrefix(f, "--") {
					break
				}
				var src string
				switch {
				case kw == "COPY" && strings.HasPrefix(f, "--from="):
					src = strings.TrimPrefix(f, "--from=")
				case kw == "RUN" && strings.HasPrefix(f, "--mount="):
					for _, kv := range strings.Split(strings.TrimPrefix(f, "--mount="), ",") {
						if k, v, ok := strings.Cut(kv, "="); ok && k == "from" {
							src = v
						}
					}
				}
				src = strings.Trim(src, `"'`)
				if src == "" || refs.stages[strings.ToLower(src)] || isIndex(src) || strings.Contains(src, "$") {
					continue
				}
				add(src)
			}
		}
	}
	if froms == 0 {
		return refs, invalid("dockerfile: no FROM instruction")
	}
	return refs, nil
}

// stageBefore reports whether a FROM's image is an earlier stage; the
// stage this FROM names is not before itself.
func (r dockerfileRefs) stageBefore(img string, rest []string) bool {
	name := strings.ToLower(img)
	if len(rest) >= 3 && strings.EqualFold(rest[1], "AS") && strings.ToLower(rest[2]) == name {
		return false
	}
	return r.stages[name]
}

func isIndex(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}

// expandArgs expands $NAME, ${NAME}, ${NAME:-word} and ${NAME:+word} with
// vars, as the Dockerfile frontend does in FROM.
func expandArgs(s string, vars map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		if s[i+1] == '{' {
			end := strings.IndexByte(s[i:], '}')
			if end < 0 {
				b.WriteString(s[i:])
				break
			}
			expr := s[i+2 : i+end]
			i += end
			name, word := expr, ""
			op := ""
			if j := strings.Index(expr, ":-"); j >= 0 {
				name, op, word = expr[:j], "-", expr[j+2:]
			} else if j := strings.Index(expr, ":+"); j >= 0 {
				name, op, word = expr[:j], "+", expr[j+2:]
			}
			v := vars[name]
			switch {
			case op == "-" && v == "":
				v = word
			case op == "+" && v != "":
				v = word
			case op == "+":
				v = ""
			}
			b.WriteString(v)
			continue
		}
		j := i + 1
		for j < len(s) && (s[j] == '_' || s[j] >= 'a' && s[j] <= 'z' || s[j] >= 'A' && s[j] <= 'Z' || s[j] >= '0' && s[j] <= '9') {
			j++
		}
		if j == i+1 {
			b.WriteByte('$')
			continue
		}
		b.WriteString(vars[s[i+1:j]])
		i = j - 1
	}
	return b.String()
}

// ReplaceFinalBase answers the Dockerfile with the base of its final stage
// (target's, if set) replaced by image: the FROM line that stage descends
// from (through earlier stages) names image instead. Other stages keep
// theirs, also when they name the same image. A final stage on scratch, or
// whose FROM continues over several lines, is ErrFailedPrecondition.
func ReplaceFinalBase(content string, args map[string]string, target, image string) (string, error) {
	refs, err := DockerfileImages(content, args)
	if err != nil {
		return "", err
	}
	root := refs.last
	if target != "" {
		var ok bool
		if root, ok = refs.roots[strings.ToLower(target)]; !ok {
			return "", invalid("dockerfile: target: no stage named %q", target)
		}
	}
	switch {
	case strings.EqualFold(root.Image, "scratch"):
		return "", fmt.Errorf("dockerfile: the final stage is built FROM scratch: there is no base to replace: %w", errdefs.ErrFailedPrecondition)
	case root.Joined:
		return "", fmt.Errorf("dockerfile: line %d: the final stage's FROM continues over several lines; write it on one line to rebuild on another base: %w", root.Line+1, errdefs.ErrFailedPrecondition)
	}
	lines := strings.Split(strings.ReplaceAll(content, "\r\n", "\n"), "\n")
	fields := strings.Fields(lines[root.Line])
	for i := 1; i < len(fields); i++ {
		if strings.HasPrefix(fields[i], "--") {
			continue
		}
		if fields[i] != root.Token {
			break
		}
		fields[i] = image
		lines[root.Line] = strings.Join(fields, " ")
		return strings.Join(lines, "\n"), nil
	}
	return "", fmt.Errorf("dockerfile: line %d: cannot find the final stage's image %q: %w", root.Line+1, root.Token, errdefs.ErrFailedPrecondition)
}
