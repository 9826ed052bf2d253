package devcontainer

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/internal/shellwords"
)

// Names in the generated build.
const (
	// ExtraDir is the directory the generated build adds to the context:
	// fetched features and the lifecycle scripts. A context that has one
	// is refused.
	ExtraDir = ".envd-devcontainer"
	// PostStartPath is where the image keeps postStartCommand and
	// postAttachCommand; an instance's init runs it at each start
	// (runtime.PostStartHook).
	PostStartPath = "/etc/envd/post-start"
	// buildStage names the user's Dockerfile's last stage when it has no
	// name.
	buildStage = "envd_devcontainer_build"
	mountDir   = "/tmp/envd-devcontainer"
	// MaxDockerfileBytes bounds build.dockerfile (as the node does).
	MaxDockerfileBytes = 1 << 20
)

// Plan is a devcontainer.json translated for envd: a Dockerfile build and
// the project settings it names.
type Plan struct {
	Config     *Config
	Dockerfile string
	Args       map[string]string
	// ContextDir is the user's build context ("" for an image); Extra holds
	// ExtraDir, which the build context gets beside it.
	ContextDir string
	Extra      string
	Features   []Feature
	Ports      []Port
	Volumes    []Mount
	// EnvdSpec is customizations.envd.spec (nil: none): a build of it on
	// the Dockerfile build's version follows.
	EnvdSpec []byte
}

// Port is a port devcontainer.json names (forwardPorts, portsAttributes).
type Port struct {
	Port     int
	Label    string
	Protocol string
}

// Options are what Translate needs besides the file.
type Options struct {
	// Work is an empty directory for the fetched features and scripts
	// (Plan.Extra is made in it).
	Work    string
	Fetcher Fetcher // ConfigDir and Dir are set by Translate
}

// Load finds the devcontainer.json of a path: a file, a directory holding
// .devcontainer/devcontainer.json, .devcontainer.json or devcontainer.json.
func Load(p string) (string, error) {
	st, err := os.Stat(p)
	if err != nil {
		return "", err
	}
	if !st.IsDir() {
		return p, nil
	}
	for _, c := range []string{".devcontainer/devcontainer.json", ".devcontainer.json", "devcontainer.json"} {
		if st, err := os.Stat(filepath.Join(p, c)); err == nil && st.Mode().IsRegular() {
			return filepath.Join(p, c), nil
		}
	}
	return "", fmt.Errorf("%s has no .devcontainer/devcontainer.json, .devcontainer.json or devcontainer.json: %w", p, errdefs.ErrNotFound)
}

// Workspace is the directory a devcontainer.json at file describes.
func Workspace(file string) string {
	dir := filepath.Dir(file)
	if filepath.Base(dir) == ".devcontainer" {
		return filepath.Dir(dir)
	}
	return dir
}

// Translate reads the devcontainer.json at file, fetches its features and
// writes the Dockerfile and context additions of its build.
func Translate(ctx context.Context, file string, o Options) (*Plan, error) {
	st, err := os.Stat(file)
	if err != nil {
		return nil, err
	}
	if st.Size() > MaxConfigBytes {
		return nil, fmt.Errorf("devcontainer.json: larger than %d bytes: %w", MaxConfigBytes, errdefs.ErrInvalidArgument)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	c, err := Parse(data)
	if err != nil {
		return nil, err
	}
	configDir := filepath.Dir(file)
	p := &Plan{Config: c, Extra: filepath.Join(o.Work, "extra"), Volumes: c.Mounts, Ports: ports(c), EnvdSpec: c.EnvdSpec}
	extra := filepath.Join(p.Extra, ExtraDir)
	if err := os.MkdirAll(filepath.Join(extra, "features"), 0o755); err != nil {
		return nil, err
	}
	var df strings.Builder
	base := c.Image
	if c.Build != nil {
		ws, err := filepath.EvalSymlinks(Workspace(file))
		if err != nil {
			return nil, err
		}
		dfPath, err := inside(ws, filepath.Join(configDir, filepath.FromSlash(c.Build.Dockerfile)), "build.dockerfile")
		if err != nil {
			return nil, err
		}
		ctxDir := c.Build.Context
		if ctxDir == "" {
			ctxDir = "."
		}
		if p.ContextDir, err = inside(ws, filepath.Join(configDir, filepath.FromSlash(ctxDir)), "build.context"); err != nil {
			return nil, err
		}
		if st, err := os.Stat(p.ContextDir); err != nil || !st.IsDir() {
			return nil, invalid("build.context", "%s is not a directory", ctxDir)
		}
		if _, err := os.Lstat(filepath.Join(p.ContextDir, ExtraDir)); err == nil {
			return nil, invalid("build.context", "the context has a %s, which envd's build adds", ExtraDir)
		}
		st, err := os.Stat(dfPath)
		if err != nil || !st.Mode().IsRegular() {
			return nil, invalid("build.dockerfile", "%s is not a file", c.Build.Dockerfile)
		}
		if st.Size() > MaxDockerfileBytes {
			return nil, invalid("build.dockerfile", "larger than %d bytes", MaxDockerfileBytes)
		}
		text, err := os.ReadFile(dfPath)
		if err != nil {
			return nil, err
		}
		user, stage, err := nameLastStage(string(text), c.Build.Target)
		if err != nil {
			return nil, err
		}
		df.WriteString(strings.TrimRight(user, "\n") + "\n\n")
		base = stage
		p.Args = c.Build.Args
	}
	fetcher := o.Fetcher
	fetcher.ConfigDir, fetcher.Dir = configDir, filepath.Join(extra, "features")
	if p.Features, err = fetcher.Fetch(ctx, c); err != nil {
		return nil, err
	}
	user := c.RemoteUser
	if user == "" {
		user = c.ContainerUser
	}
	mount := "--mount=type=bind,source=" + ExtraDir + ",target=" + mountDir + ",rw"
	fmt.Fprintf(&df, "# envd: the features, environment and lifecycle commands of devcontainer.json\nFROM %s\n", base)
	if len(p.Features) > 0 {
		df.WriteString("USER root\n")
	}
	for i, f := range p.Features {
		writeEnv(&df, f.Metadata.ContainerEnv, false)
		script := fmt.Sprintf("feature-%d.sh", i)
		if err := os.WriteFile(filepath.Join(extra, script), []byte(featureScript(i, f, c)), 0o644); err != nil {
			return nil, err
		}
		fmt.Fprintf(&df, "# feature %s\nRUN %s [\"/bin/sh\", %q]\n", f.Ref, mount, mountDir+"/"+script)
	}
	writeEnv(&df, c.ContainerEnv, true)
	writeEnv(&df, c.RemoteEnv, true)
	if c.PostStart != nil || c.PostAttach != nil {
		var s strings.Builder
		s.WriteString("#!/bin/sh\n# devcontainer.json's postStartCommand and postAttachCommand: an instance's init runs this at each start.\n")
		for _, h := range []struct {
			name string
			c    *Command
		}{{"postStartCommand", c.PostStart}, {"postAttachCommand", c.PostAttach}} {
			if h.c != nil {
				fmt.Fprintf(&s, "(\n%s) || echo \"envd: %s exited $?\" >&2\n", commandScript(h.name, *h.c), h.name)
			}
		}
		if err := os.WriteFile(filepath.Join(extra, "post-start.sh"), []byte(s.String()), 0o644); err != nil {
			return nil, err
		}
		fmt.Fprintf(&df, "COPY --chmod=0755 [%q, %q]\n", ExtraDir+"/post-start.sh", PostStartPath)
	}
	if user != "" {
		fmt.Fprintf(&df, "USER %s\n", user)
	}
	for _, h := range []struct {
		name string
		c    *Command
	}{{"onCreateCommand", c.OnCreate}, {"updateContentCommand", c.UpdateContent}, {"postCreateCommand", c.PostCreate}} {
		if h.c == nil {
			continue
		}
		if err := os.WriteFile(filepath.Join(extra, h.name+".sh"), []byte(commandScript(h.name, *h.c)), 0o644); err != nil {
			return nil, err
		}
		fmt.Fprintf(&df, "# %s\nRUN %s [\"/bin/sh\", %q]\n", h.name, mount, mountDir+"/"+h.name+".sh")
	}
	p.Dockerfile = df.String()
	return p, nil
}

// inside resolves p (symbolic links too) and refuses it outside ws.
func inside(ws, p, prop string) (string, error) {
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", invalid(prop, "%v", err)
	}
	rel, err := filepath.Rel(ws, real)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") || filepath.IsAbs(rel) {
		return "", invalid(prop, "%s is outside the workspace %s", p, ws)
	}
	return real, nil
}

var fromLine = regexp.MustCompile(`(?i)^\s*FROM\s`)

// nameLastStage returns the Dockerfile with its last stage named (unless
// target names the stage to build on) and that stage's name.
func nameLastStage(text, target string) (string, string, error) {
	if target != "" {
		if !regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.-]*$`).MatchString(target) {
			return "", "", invalid("build.target", "%q is not a stage name", target)
		}
		return text, target, nil
	}
	lines := strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n")
	last := -1
	for i, l := range lines {
		if fromLine.MatchString(l) {
			last = i
		}
	}
	if last < 0 {
		return "", "", invalid("build.dockerfile", "no FROM instruction")
	}
	line := strings.TrimSpace(lines[last])
	if strings.HasSuffix(line, "\\") || strings.HasSuffix(line, "`") {
		return "", "", invalid("build.dockerfile", "the last FROM continues on the next line; put it on one line or give build.target")
	}
	fields := strings.Fields(line)
	rest := fields[1:]
	for len(rest) > 0 && strings.HasPrefix(rest[0], "--") {
		rest = rest[1:]
	}
	if len(rest) >= 3 && strings.EqualFold(rest[1], "AS") {
		return text, rest[2], nil
	}
	lines[last] = line + " AS " + buildStage
	return strings.Join(lines, "\n"), buildStage, nil
}

// writeEnv writes ENV lines, sorted by name. Values of devcontainer.json
// (literal) have every $ escaped but ${containerEnv:NAME}, which becomes
// ${NAME}; a feature's values keep Dockerfile expansion (${PATH}), as the
// spec's features expect.
func writeEnv(b *strings.Builder, env map[string]string, literal bool) {
	for _, k := range slices.Sorted(maps.Keys(env)) {
		v := strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(env[k])
		if literal {
			v = strings.ReplaceAll(v, "$", `\$`)
			v = containerEnvRef.ReplaceAllString(v, "$${$1}")
		}
		fmt.Fprintf(b, "ENV %s=\"%s\"\n", k, v)
	}
}

var containerEnvRef = regexp.MustCompile(`\\\$\{containerEnv:([A-Za-z_][A-Za-z0-9_]*)\}`)

// commandScript is a lifecycle command as a shell script: a string runs
// with sh -c, an array as it is, an object's entries at the same time
// (the script fails if any does).
func commandScript(name string, c Command) string {
	one := func(c Command) string {
		if c.Args != nil {
			return shellwords.Join(c.Args)
		}
		return "/bin/sh -c " + shellwords.Quote(c.Shell)
	}
	if c.Parallel == nil {
		return one(c) + "\n"
	}
	var b strings.Builder
	keys := slices.Sorted(maps.Keys(c.Parallel))
	for i, k := range keys {
		fmt.Fprintf(&b, "%s &\np%d=$!\n", one(c.Parallel[k]), i)
	}
	b.WriteString("rc=0\n")
	for i, k := range keys {
		fmt.Fprintf(&b, "wait $p%d || { echo %s >&2; rc=1; }\n", i, shellwords.Quote(fmt.Sprintf("%s: %s failed", name, k)))
	}
	b.WriteString("exit $rc\n")
	return b.String()
}

// optionEnv is the variable of a feature option, as the spec derives it:
// non-word characters to _, leading digits and _ to one _, upper case.
func optionEnv(id string) string {
	s := regexp.MustCompile(`[^\w]`).ReplaceAllString(id, "_")
	s = regexp.MustCompile(`^[\d_]+`).ReplaceAllString(s, "_")
	return strings.ToUpper(s)
}

// featureScript installs feature i: its options (defaults, then asked)
// and the users as variables, quoted; then its install.sh, as root, in its
// directory.
func featureScript(i int, f Feature, c *Config) string {
	vals := map[string]string{}
	for id, o := range f.Metadata.Options {
		switch d := o.Default.(type) {
		case string:
			vals[id] = d
		case bool:
			vals[id] = fmt.Sprint(d)
		case nil:
			vals[id] = ""
		default:
			vals[id] = fmt.Sprint(d)
		}
	}
	for k, v := range f.Options {
		if _, ok := f.Metadata.Options[k]; ok {
			vals[k] = v
		}
	}
	remote, container := c.RemoteUser, c.ContainerUser
	if container == "" {
		container = "root"
	}
	if remote == "" {
		remote = container
	}
	var b strings.Builder
	fmt.Fprintf(&b, "set -e\ncd %s/features/%d\n", mountDir, i)
	fmt.Fprintf(&b, "_REMOTE_USER=%s\n_CONTAINER_USER=%s\n", shellwords.Quote(remote), shellwords.Quote(container))
	// The homes from /etc/passwd, in sh alone (the image may have no awk).
	b.WriteString("_REMOTE_USER_HOME= _CONTAINER_USER_HOME=\n")
	b.WriteString("while IFS=: read -r n _ _ _ _ h _; do\n")
	b.WriteString("  [ \"$n\" = \"$_REMOTE_USER\" ] && _REMOTE_USER_HOME=$h\n")
	b.WriteString("  [ \"$n\" = \"$_CONTAINER_USER\" ] && _CONTAINER_USER_HOME=$h\n")
	b.WriteString("done < /etc/passwd || true\n")
	b.WriteString("export _REMOTE_USER _CONTAINER_USER _REMOTE_USER_HOME _CONTAINER_USER_HOME\n")
	for _, id := range slices.Sorted(maps.Keys(vals)) {
		fmt.Fprintf(&b, "export %s=%s\n", optionEnv(id), shellwords.Quote(vals[id]))
	}
	b.WriteString("chmod +x ./install.sh\nexec ./install.sh\n")
	return b.String()
}

// ports are the ports devcontainer.json names, with their attributes.
func ports(c *Config) []Port {
	set := map[int]bool{}
	for _, p := range c.ForwardPorts {
		set[p] = true
	}
	for p := range c.PortsAttributes {
		set[p] = true
	}
	var out []Port
	for _, p := range slices.Sorted(maps.Keys(set)) {
		a := c.PortsAttributes[p]
		out = append(out, Port{Port: p, Label: a.Label, Protocol: a.Protocol})
	}
	return out
}
