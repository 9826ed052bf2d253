package builder

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
)

// Bounds of a spec's parts.
const (
	MaxFiles   = 500
	MaxRun     = 100
	MaxEnv     = 100
	MaxSources = 50
	// MaxContextFileBytes bounds one file a build takes from its context.
	MaxContextFileBytes = 64 << 20
)

var (
	envName    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	sourceName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]*$`)
	contextRef = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
)

// notSaved are the trees a build's file cannot go to: runtime mounts a
// save leaves out, so the file would not be in the version.
var notSaved = []string{"/proc", "/sys", "/dev", "/run", "/tmp"}

func invalid(format string, a ...any) error {
	return fmt.Errorf(format+": %w", append(a, errdefs.ErrInvalidArgument)...)
}

// CheckSpec validates a whole build request: the packages (Check) when
// there are any, the sources, files, environment and run steps. Every
// error is errdefs.ErrInvalidArgument naming the offending entry.
func CheckSpec(req types.BuildRequest) error {
	if req.Dockerfile != nil {
		return checkDockerfile(req)
	}
	if len(req.Packages) == 0 && len(req.Files) == 0 && len(req.Run) == 0 {
		return invalid("nothing to build: give packages, files or run steps")
	}
	if len(req.Packages) > 0 || req.Manager != "" {
		if len(req.Packages) == 0 {
			if req.Manager != Apt && req.Manager != Apk {
				return invalid("manager %q: must be apt or apk", req.Manager)
			}
		} else if err := Check(req.Manager, req.Packages); err != nil {
			return err
		}
	}
	if err := checkSources(req.Manager, req.Sources); err != nil {
		return err
	}
	if req.Context != "" && !contextRef.MatchString(req.Context) {
		return invalid("context %q: not a sha256:HEX digest", req.Context)
	}
	if len(req.Files) > MaxFiles {
		return invalid("files: at most %d, not %d", MaxFiles, len(req.Files))
	}
	seen := map[string]bool{}
	for _, f := range req.Files {
		if err := checkFile(f, req.Context != ""); err != nil {
			return err
		}
		if seen[f.Path] {
			return invalid("file %q: given twice", f.Path)
		}
		seen[f.Path] = true
	}
	if len(req.Env) > MaxEnv {
		return invalid("env: at most %d variables, not %d", MaxEnv, len(req.Env))
	}
	for k, v := range req.Env {
		if !envName.MatchString(k) {
			return invalid("env %q: not a variable name", k)
		}
		if strings.ContainsRune(v, 0) {
			return invalid("env %q: a NUL byte in its value", k)
		}
	}
	if len(req.Run) > MaxRun {
		return invalid("run: at most %d steps, not %d", MaxRun, len(req.Run))
	}
	for i, st := range req.Run {
		if len(st.Args) == 0 || st.Args[0] == "" {
			return invalid("run step %d: an empty command", i+1)
		}
		if st.Shell && len(st.Args) != 1 {
			return invalid("run step %d: with shell, args is one script, not %d strings", i+1, len(st.Args))
		}
		for _, a := range st.Args {
			if strings.ContainsRune(a, 0) {
				return invalid("run step %d: a NUL byte in an argument", i+1)
			}
		}
		if st.Dir != "" {
			if err := checkPath("run step dir", st.Dir); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkPath refuses a path that is not absolute and clean, or that names
// the root: such a path could leave the image's root or mean something
// else than it says.
func checkPath(what, p string) error {
	if strings.ContainsRune(p, 0) {
		return invalid("%s %q: a NUL byte", what, p)
	}
	if !path.IsAbs(p) || path.Clean(p) != p || p == "/" {
		return invalid("%s %q: must be an absolute, clean path inside the image (no \"..\", not \"/\")", what, p)
	}
	return nil
}

func checkFile(f types.BuildFile, haveContext bool) error {
	if err := checkPath("file", f.Path); err != nil {
		return err
	}
	for _, t := range notSaved {
		if f.Path == t || strings.HasPrefix(f.Path, t+"/") {
			return invalid("file %q: %s is not saved in a version", f.Path, t)
		}
	}
	given := 0
	for _, s := range []string{f.Content, f.ContentBase64, f.Source} {
		if s != "" {
			given++
		}
	}
	if given > 1 {
		return invalid("file %q: give one of content, content_base64 and source", f.Path)
	}
	if f.ContentBase64 != "" {
		if _, err := base64.StdEncoding.DecodeString(f.ContentBase64); err != nil {
			return invalid("file %q: content_base64: %v", f.Path, err)
		}
	}
	if f.Source != "" {
		if !haveContext {
			return invalid("file %q: source %q needs a build context (context)", f.Path, f.Source)
		}
		if _, err := contextName(f.Source); err != nil {
			return invalid("file %q: source %q: %v", f.Path, f.Source, err)
		}
	}
	if _, err := FileMode(f.Mode); err != nil {
		return invalid("file %q: %v", f.Path, err)
	}
	return nil
}

// contextName is a source path as a context tar names it: relative,
// clean, not leaving the context.
func contextName(src string) (string, error) {
	s := strings.TrimPrefix(src, "./")
	if s == "" || path.IsAbs(s) || path.Clean(s) != s || s == "." || s == ".." || strings.HasPrefix(s, "../") {
		return "", fmt.Errorf("must be a clean relative path inside the context")
	}
	return s, nil
}

// ContextName is the name under which a build context holds src (checked
// by CheckSpec).
func ContextName(src string) string {
	s, _ := contextName(src)
	return s
}

// FileMode parses a file's mode: octal permission bits, "" = 0644.
func FileMode(m string) (uint32, error) {
	if m == "" {
		return 0o644, nil
	}
	v, err := strconv.ParseUint(m, 8, 32)
	if err != nil || v > 0o7777 {
		return 0, fmt.Errorf("mode %q: not octal permission bits (0644, 0755)", m)
	}
	return uint32(v), nil
}

// sourcePath places a sources list or key: a bare name in dir, an
// absolute path under one of roots.
func sourcePath(name, dir string, roots ...string) (string, error) {
	if !strings.HasPrefix(name, "/") {
		if !sourceName.MatchString(name) {
			return "", invalid("source %q: not a file name", name)
		}
		return path.Join(dir, name), nil
	}
	if err := checkPath("source", name); err != nil {
		return "", err
	}
	for _, r := range roots {
		if strings.HasPrefix(name, r) {
			return name, nil
		}
	}
	return "", invalid("source %q: must lie under %s", name, strings.Join(roots, " or "))
}

// aptListPath places an apt sources list.
func aptListPath(name string) (string, error) {
	if name == "sources.list" {
		return "/etc/apt/sources.list", nil
	}
	p, err := sourcePath(name, "/etc/apt/sources.list.d", "/etc/apt/")
	if err != nil {
		return "", err
	}
	if !strings.HasPrefix(name, "/") && !strings.HasSuffix(name, ".list") && !strings.HasSuffix(name, ".sources") {
		return "", invalid("apt source %q: a name ends with .list or .sources", name)
	}
	return p, nil
}

func checkSourceFile(what string, f types.SourceFile) error {
	if f.Content != "" && f.ContentBase64 != "" {
		return invalid("%s %q: give content or content_base64, not both", what, f.Name)
	}
	if f.ContentBase64 != "" {
		if _, err := base64.StdEncoding.DecodeString(f.ContentBase64); err != nil {
			return invalid("%s %q: content_base64: %v", what, f.Name, err)
		}
	}
	return nil
}

func checkSources(manager string, s *types.BuildSources) error {
	if s == nil {
		return nil
	}
	if n := len(s.Apt) + len(s.AptKeys) + len(s.Apk) + len(s.ApkKeys); n > MaxSources {
		return invalid("sources: at most %d entries, not %d", MaxSources, n)
	}
	if len(s.Apt)+len(s.AptKeys) > 0 && manager != Apt {
		return invalid("sources: apt sources need manager apt, not %q", manager)
	}
	if len(s.Apk)+len(s.ApkKeys) > 0 && manager != Apk {
		return invalid("sources: apk repositories need manager apk, not %q", manager)
	}
	for _, f := range s.Apt {
		if _, err := aptListPath(f.Name); err != nil {
			return err
		}
		if err := checkSourceFile("apt source", f); err != nil {
			return err
		}
	}
	for _, f := range s.AptKeys {
		if _, err := sourcePath(f.Name, "/etc/apt/keyrings", "/etc/apt/", "/usr/share/keyrings/"); err != nil {
			return err
		}
		if err := checkSourceFile("apt key", f); err != nil {
			return err
		}
	}
	for _, f := range s.ApkKeys {
		if _, err := sourcePath(f.Name, "/etc/apk/keys", "/etc/apk/"); err != nil {
			return err
		}
		if err := checkSourceFile("apk key", f); err != nil {
			return err
		}
	}
	for _, r := range s.Apk {
		if r == "" || strings.ContainsAny(r, "\n\r\x00") || len(r) > 1024 {
			return invalid("apk repository %q: one line of at most 1024 bytes", r)
		}
	}
	return nil
}

// writeScript writes its standard input to "$1" with mode "$2", making the
// parent directories: a fixed script, the spec's values are its arguments.
const writeScript = `set -e; mkdir -p "$(dirname "$1")"; cat > "$1"; chmod "$2" "$1"`

// addReposScript adds each argument as a line of /etc/apk/repositories
// unless the line is there already.
const addReposScript = `set -e; f=/etc/apk/repositories; touch "$f"; for r; do grep -qxF -e "$r" "$f" || printf '%s\n' "$r" >> "$f"; done`

// Write is the step that writes content to p with mode.
func Write(p string, mode uint32, content []byte, what string) Step {
	return Step{Args: []string{"sh", "-c", writeScript, "sh", p, fmt.Sprintf("%04o", mode)}, Stdin: content,
		What: what, Quiet: true}
}

// Contents returns a file's or source's bytes; context reads a file of the
// build context by its name there.
func contents(text, b64, source string, context func(name string) ([]byte, error)) ([]byte, error) {
	switch {
	case b64 != "":
		return base64.StdEncoding.DecodeString(b64)
	case source != "":
		if context == nil {
			return nil, invalid("source %q: the build has no context", source)
		}
		return context(ContextName(source))
	}
	return []byte(text), nil
}

// Plan returns every command of a build (CheckSpec first), in order:
// sources written, packages installed, files written, run steps. context
// reads a file of the build's uploaded context (nil when it has none).
func Plan(req types.BuildRequest, context func(name string) ([]byte, error)) ([]Step, error) {
	var env []string
	for k, v := range req.Env {
		env = append(env, k+"="+v)
	}
	slices.Sort(env)
	var steps []Step
	if s := req.Sources; s != nil {
		for _, f := range s.AptKeys {
			p, _ := sourcePath(f.Name, "/etc/apt/keyrings", "/etc/apt/", "/usr/share/keyrings/")
			b, _ := contents(f.Content, f.ContentBase64, "", nil)
			steps = append(steps, Write(p, 0o644, b, "apt key "+p))
		}
		for _, f := range s.Apt {
			p, _ := aptListPath(f.Name)
			b, _ := contents(f.Content, f.ContentBase64, "", nil)
			steps = append(steps, Write(p, 0o644, b, "apt source "+p))
		}
		for _, f := range s.ApkKeys {
			p, _ := sourcePath(f.Name, "/etc/apk/keys", "/etc/apk/")
			b, _ := contents(f.Content, f.ContentBase64, "", nil)
			steps = append(steps, Write(p, 0o644, b, "apk key "+p))
		}
		if len(s.Apk) > 0 {
			steps = append(steps, Step{Args: append([]string{"sh", "-c", addReposScript, "sh"}, s.Apk...),
				What: "apk repositories", Quiet: true})
		}
	}
	if len(req.Packages) > 0 {
		for _, st := range Steps(req.Manager, req.Packages) {
			st.Env = append(st.Env, env...)
			steps = append(steps, st)
		}
	}
	for _, f := range req.Files {
		b, err := contents(f.Content, f.ContentBase64, f.Source, context)
		if err != nil {
			return nil, fmt.Errorf("file %q: %w", f.Path, err)
		}
		mode, _ := FileMode(f.Mode)
		steps = append(steps, Write(f.Path, mode, b, "file "+f.Path))
	}
	for _, r := range req.Run {
		st := Step{Args: r.Args, Env: env, Dir: r.Dir}
		if r.Shell {
			st.Args = []string{"sh", "-c", r.Args[0]}
		}
		steps = append(steps, st)
	}
	return steps, nil
}

// SpecKey identifies a build's result by its base image and whole spec. A
// spec of packages and validation only keeps the key Key gives it, so
// builds made before specs had more parts are still reused.
func SpecKey(baseImage string, req types.BuildRequest) string {
	key := Key(baseImage, req.Manager, req.Packages, req.Validate)
	if req.Sources == nil && len(req.Files) == 0 && len(req.Env) == 0 && len(req.Run) == 0 && req.Context == "" {
		return key
	}
	extra, _ := json.Marshal(struct {
		Sources *types.BuildSources `json:"sources"`
		Files   []types.BuildFile   `json:"files"`
		Env     map[string]string   `json:"env"` // json sorts map keys
		Run     []types.BuildStep   `json:"run"`
		Context string              `json:"context"`
	}{req.Sources, req.Files, req.Env, req.Run, req.Context})
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s", key, extra)
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}
