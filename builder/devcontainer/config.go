// Package devcontainer reads a devcontainer.json (containers.dev), checks
// it against what envd can do, and translates it into a Dockerfile build
// (builder/dockerfile_build.go: BuildKit on the node) plus the project
// settings it names (ports, volumes). It also writes a devcontainer.json
// and Dockerfile from a version's build spec (Export).
//
// Terms:
//   - workspace: the directory a devcontainer.json describes: the parent of
//     its ".devcontainer" directory, or the file's own directory otherwise.
//     Paths in the file (build.dockerfile, build.context) must stay in it.
//   - feature: a directory with devcontainer-feature.json and install.sh,
//     distributed as an OCI artifact (one tar layer) or kept beside the
//     file ("./name" under .devcontainer). envctl fetches features on the
//     client's side: the node reaches no registry outside its own.
//
// What envd does with each supported property, and when it runs, is in
// docs/api.md ("devcontainer.json builds"). Every other property is
// refused by name (ErrInvalidArgument, details.property), never ignored.
package devcontainer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/envd-dev/envd/errdefs"
)

// MaxConfigBytes bounds a devcontainer.json.
const MaxConfigBytes = 1 << 20

// Config is a devcontainer.json as envd reads it.
type Config struct {
	Name  string
	Image string // FROM this imported image (no Build)
	Build *Build
	// Features by reference ("host/path:tag", "./local"), with their
	// options (a string value is the option "version").
	Features      map[string]map[string]string
	ContainerEnv  map[string]string
	RemoteEnv     map[string]string
	RemoteUser    string
	ContainerUser string
	// Lifecycle commands by property name (OnCreate, ...): nil = none.
	OnCreate, UpdateContent, PostCreate, PostStart, PostAttach *Command
	ForwardPorts                                               []int
	PortsAttributes                                            map[int]PortAttributes
	Mounts                                                     []Mount
	// Docker: "privileged": true or runArgs ["--privileged"], which
	// devcontainers use to run Docker inside. It is no build step: envctl
	// turns the project's docker setting on (docs/api.md "Docker inside an
	// instance"), which is refused unless its runtime class is gvisor.
	Docker bool
	// EnvdSpec is customizations.envd.spec: an envd build spec (packages,
	// sources, files, run) built on the image in a build container, after
	// the Dockerfile build; envctl decodes it. Nil: none.
	EnvdSpec json.RawMessage
}

// Build is devcontainer.json's "build".
type Build struct {
	Dockerfile string // relative to the devcontainer.json's directory
	Context    string // relative to it; "" = "."
	Args       map[string]string
	Target     string
}

// Command is a lifecycle command: Shell (a string: sh -c), Args (an
// array: run as is, no shell) or Parallel (an object: each entry, named,
// runs at the same time; all must succeed).
type Command struct {
	Shell    string
	Args     []string
	Parallel map[string]Command
}

// PortAttributes is an entry of portsAttributes.
type PortAttributes struct {
	Label    string
	Protocol string // "", "http" or "https"
}

// Mount is an entry of mounts: a named volume at Target.
type Mount struct {
	Source string
	Target string
}

// refused is the error for a property envd does not do, naming it.
func refused(prop, reason string) error {
	return errdefs.WithDetails(fmt.Errorf("devcontainer.json: %s: %s: %w", prop, reason, errdefs.ErrInvalidArgument),
		map[string]any{"property": prop})
}

// invalid is the error for a supported property with a bad value.
func invalid(prop, format string, a ...any) error {
	return refused(prop, fmt.Sprintf(format, a...))
}

// topLevel are the supported properties; knownLater names properties the
// spec has that envd refuses, with why (others get a generic reason).
var topLevel = []string{"$schema", "name", "image", "build", "features", "containerEnv", "remoteEnv",
	"remoteUser", "containerUser", "onCreateCommand", "updateContentCommand", "postCreateCommand",
	"postStartCommand", "postAttachCommand", "forwardPorts", "portsAttributes", "mounts", "customizations",
	"privileged", "runArgs"}

var refusedWhy = map[string]string{
	"dockerFile":                  `the old form: use "build": {"dockerfile": ...}`,
	"context":                     `the old form: use "build": {"context": ...}`,
	"dockerComposeFile":           "Docker Compose is not run by envd",
	"initializeCommand":           "it runs on the client's machine, which envd does not do",
	"workspaceFolder":             "envd has no workspace mount; use mounts (volumes)",
	"workspaceMount":              "envd has no workspace mount; use mounts (volumes)",
	"capAdd":                      "instances get no added capabilities",
	"securityOpt":                 "instances' security options are envd's",
	"appPort":                     "use forwardPorts",
	"overrideFeatureInstallOrder": "features are ordered by installsAfter only",
}

// Parse reads a devcontainer.json (comments and trailing commas allowed).
func Parse(data []byte) (*Config, error) {
	if len(data) > MaxConfigBytes {
		return nil, fmt.Errorf("devcontainer.json: larger than %d bytes: %w", MaxConfigBytes, errdefs.ErrInvalidArgument)
	}
	std, err := standardize(data)
	if err != nil {
		return nil, err
	}
	var top map[string]json.RawMessage
	if err := strictDecode(std, &top); err != nil {
		return nil, fmt.Errorf("devcontainer.json: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	if top == nil {
		return nil, fmt.Errorf("devcontainer.json: not an object: %w", errdefs.ErrInvalidArgument)
	}
	for _, k := range slices.Sorted(maps.Keys(top)) {
		if slices.Contains(topLevel, k) {
			continue
		}
		why, ok := refusedWhy[k]
		if !ok {
			why = "not supported by envd"
		}
		return nil, refused(k, why)
	}
	c := &Config{}
	str := func(k string, dst *string) error {
		if raw, ok := top[k]; ok {
			if err := json.Unmarshal(raw, dst); err != nil {
				return invalid(k, "not a string")
			}
		}
		return nil
	}
	for k, dst := range map[string]*string{"name": &c.Name, "image": &c.Image, "remoteUser": &c.RemoteUser, "containerUser": &c.ContainerUser} {
		if err := str(k, dst); err != nil {
			return nil, err
		}
	}
	if raw, ok := top["build"]; ok {
		if c.Build, err = parseBuild(raw); err != nil {
			return nil, err
		}
	}
	switch {
	case c.Image == "" && c.Build == nil:
		return nil, refused("image", `one of "image" and "build" is required`)
	case c.Image != "" && c.Build != nil:
		return nil, refused("image", `"image" and "build" are exclusive`)
	case c.Image != "" && !imageRef.MatchString(c.Image):
		return nil, invalid("image", "%q is not an image name", c.Image)
	}
	if raw, ok := top["features"]; ok {
		if c.Features, err = parseFeatures(raw); err != nil {
			return nil, err
		}
	}
	for k, dst := range map[string]*map[string]string{"containerEnv": &c.ContainerEnv, "remoteEnv": &c.RemoteEnv} {
		if raw, ok := top[k]; ok {
			if *dst, err = parseEnv(k, raw); err != nil {
				return nil, err
			}
		}
	}
	if c.Docker, err = parseDocker(top); err != nil {
		return nil, err
	}
	for _, u := range []struct{ k, v string }{{"remoteUser", c.RemoteUser}, {"containerUser", c.ContainerUser}} {
		if u.v != "" && !userName.MatchString(u.v) {
			return nil, invalid(u.k, "%q is not a user name (or uid[:gid])", u.v)
		}
	}
	if c.RemoteUser != "" && c.ContainerUser != "" && c.RemoteUser != c.ContainerUser {
		return nil, refused("remoteUser", "envd runs an instance's processes and commands as one user: remoteUser and containerUser must be equal when both are given")
	}
	for k, dst := range map[string]**Command{"onCreateCommand": &c.OnCreate, "updateContentCommand": &c.UpdateContent,
		"postCreateCommand": &c.PostCreate, "postStartCommand": &c.PostStart, "postAttachCommand": &c.PostAttach} {
		if raw, ok := top[k]; ok {
			if *dst, err = parseCommand(k, raw, true); err != nil {
				return nil, err
			}
		}
	}
	if raw, ok := top["forwardPorts"]; ok {
		if c.ForwardPorts, err = parseForwardPorts(raw); err != nil {
			return nil, err
		}
	}
	if raw, ok := top["portsAttributes"]; ok {
		if c.PortsAttributes, err = parsePortsAttributes(raw); err != nil {
			return nil, err
		}
	}
	if raw, ok := top["customizations"]; ok {
		if c.EnvdSpec, err = parseCustomizations(raw); err != nil {
			return nil, err
		}
	}
	if raw, ok := top["mounts"]; ok {
		if c.Mounts, err = parseMounts(raw); err != nil {
			return nil, err
		}
	}
	return c, nil
}

var (
	imageRef = regexp.MustCompile(`^[a-z0-9][a-z0-9._/:@-]{0,254}$`)
	// userName is a POSIX user name or uid[:gid]: nothing a Dockerfile's
	// USER or a shell would read as more than a word.
	userName = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,31})?$`)
	envName  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	argName  = envName
)

// strictDecode decodes one JSON value and refuses anything after it.
func strictDecode(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("more than one JSON value")
	}
	return nil
}

func parseBuild(raw json.RawMessage) (*Build, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return nil, invalid("build", "not an object")
	}
	b := &Build{}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		var err error
		switch k {
		case "dockerfile":
			err = json.Unmarshal(m[k], &b.Dockerfile)
		case "context":
			err = json.Unmarshal(m[k], &b.Context)
		case "target":
			err = json.Unmarshal(m[k], &b.Target)
		case "args":
			if err = json.Unmarshal(m[k], &b.Args); err == nil {
				for a := range b.Args {
					if !argName.MatchString(a) {
						return nil, invalid("build.args", "%q is not a build argument name", a)
					}
				}
			}
		default:
			return nil, refused("build."+k, "not supported by envd (dockerfile, context, args and target are)")
		}
		if err != nil {
			return nil, invalid("build."+k, "wrong type")
		}
	}
	if b.Dockerfile == "" {
		return nil, refused("build.dockerfile", "required in build")
	}
	return b, nil
}

func parseFeatures(raw json.RawMessage) (map[string]map[string]string, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return nil, invalid("features", "not an object")
	}
	out := map[string]map[string]string{}
	for _, ref := range slices.Sorted(maps.Keys(m)) {
		prop := "features." + ref
		if _, err := parseFeatureRef(ref); err != nil {
			return nil, err
		}
		var s string
		if json.Unmarshal(m[ref], &s) == nil {
			out[ref] = map[string]string{"version": s}
			continue
		}
		var b bool
		if json.Unmarshal(m[ref], &b) == nil {
			if !b {
				return nil, invalid(prop, "false: leave the feature out instead")
			}
			out[ref] = map[string]string{}
			continue
		}
		var opts map[string]any
		if err := json.Unmarshal(m[ref], &opts); err != nil || opts == nil {
			return nil, invalid(prop, "options must be an object (or a version string)")
		}
		o := map[string]string{}
		for k, v := range opts {
			switch v := v.(type) {
			case string:
				o[k] = v
			case bool:
				o[k] = strconv.FormatBool(v)
			default:
				return nil, invalid(prop+"."+k, "an option is a string or a boolean")
			}
		}
		out[ref] = o
	}
	return out, nil
}

// parseEnv reads containerEnv or remoteEnv: names, and values with
// ${containerEnv:NAME} (in remoteEnv) as the only variables.
func parseEnv(prop string, raw json.RawMessage) (map[string]string, error) {
	var m map[string]string
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, invalid(prop, "an object of strings")
	}
	for k, v := range m {
		if !envName.MatchString(k) {
			return nil, invalid(prop, "%q is not a variable name", k)
		}
		if strings.ContainsAny(v, "\n\r\x00") {
			return nil, invalid(prop+"."+k, "a value has no line breaks or NUL bytes")
		}
		for _, ref := range varRef.FindAllStringSubmatch(v, -1) {
			if ref[1] != "containerEnv" {
				return nil, invalid(prop+"."+k, "${%s:...} is not supported (only ${containerEnv:NAME})", ref[1])
			}
			if !envName.MatchString(ref[2]) {
				return nil, invalid(prop+"."+k, "${containerEnv:%s}: not a variable name", ref[2])
			}
		}
		if m := otherVar.FindString(v); m != "" {
			return nil, invalid(prop+"."+k, "%s is not supported (only ${containerEnv:NAME})", m)
		}
	}
	return m, nil
}

var (
	varRef   = regexp.MustCompile(`\$\{([A-Za-z]+):([^}]*)\}`)
	otherVar = regexp.MustCompile(`\$\{(localWorkspaceFolder|containerWorkspaceFolder|localWorkspaceFolderBasename|containerWorkspaceFolderBasename|devcontainerId)\}`)
)

// parseCommand reads a lifecycle command; nested forbids a second level
// of objects (an object's entries are strings or arrays).
func parseCommand(prop string, raw json.RawMessage, top bool) (*Command, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if strings.ContainsRune(s, 0) {
			return nil, invalid(prop, "a NUL byte")
		}
		if strings.TrimSpace(s) == "" {
			return nil, nil
		}
		return &Command{Shell: s}, nil
	}
	var a []string
	if json.Unmarshal(raw, &a) == nil {
		if len(a) == 0 {
			return nil, nil
		}
		for _, w := range a {
			if strings.ContainsRune(w, 0) {
				return nil, invalid(prop, "a NUL byte")
			}
		}
		if a[0] == "" {
			return nil, invalid(prop, "the program (first word) is empty")
		}
		return &Command{Args: a}, nil
	}
	var m map[string]json.RawMessage
	if !top || json.Unmarshal(raw, &m) != nil || m == nil {
		if top {
			return nil, invalid(prop, "a string, an array of strings or an object of those")
		}
		return nil, invalid(prop, "an entry of an object is a string or an array of strings")
	}
	c := &Command{Parallel: map[string]Command{}}
	for k, v := range m {
		sub, err := parseCommand(prop+"."+k, v, false)
		if err != nil {
			return nil, err
		}
		if sub != nil {
			c.Parallel[k] = *sub
		}
	}
	if len(c.Parallel) == 0 {
		return nil, nil
	}
	return c, nil
}

func parseForwardPorts(raw json.RawMessage) ([]int, error) {
	var list []any
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, invalid("forwardPorts", "an array of port numbers")
	}
	var ports []int
	for _, v := range list {
		f, ok := v.(float64)
		if !ok {
			return nil, invalid("forwardPorts", "%v: only port numbers (\"host:port\" forms name other containers, which envd does not run)", v)
		}
		p := int(f)
		if float64(p) != f || p < 1 || p > 65535 {
			return nil, invalid("forwardPorts", "%v is not a port number", v)
		}
		if !slices.Contains(ports, p) {
			ports = append(ports, p)
		}
	}
	slices.Sort(ports)
	return ports, nil
}

func parsePortsAttributes(raw json.RawMessage) (map[int]PortAttributes, error) {
	var m map[string]map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, invalid("portsAttributes", "an object of port: attributes")
	}
	out := map[int]PortAttributes{}
	for key, attrs := range m {
		prop := "portsAttributes." + key
		p, err := strconv.Atoi(key)
		if err != nil || p < 1 || p > 65535 {
			return nil, invalid(prop, "only single port numbers are supported as keys (not ranges or patterns)")
		}
		var a PortAttributes
		for k, v := range attrs {
			var s string
			if json.Unmarshal(v, &s) != nil {
				return nil, invalid(prop+"."+k, "not a string")
			}
			switch k {
			case "label":
				if len(s) > 128 || strings.ContainsAny(s, "\n\r\x00") {
					return nil, invalid(prop+".label", "at most 128 characters on one line")
				}
				a.Label = s
			case "protocol":
				if s != "http" && s != "https" {
					return nil, invalid(prop+".protocol", "%q: http or https", s)
				}
				a.Protocol = s
			default:
				return nil, refused(prop+"."+k, "not supported by envd (label and protocol are)")
			}
		}
		out[p] = a
	}
	return out, nil
}

func parseMounts(raw json.RawMessage) ([]Mount, error) {
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, invalid("mounts", "an array")
	}
	var out []Mount
	for i, item := range list {
		prop := fmt.Sprintf("mounts[%d]", i)
		fields := map[string]string{}
		var s string
		if json.Unmarshal(item, &s) == nil {
			for _, kv := range strings.Split(s, ",") {
				k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
				if !ok {
					return nil, invalid(prop, "%q is not key=value", kv)
				}
				fields[k] = v
			}
		} else if err := json.Unmarshal(item, &fields); err != nil {
			return nil, invalid(prop, "a string or an object of strings")
		}
		var m Mount
		typ := "volume"
		for k, v := range fields {
			switch k {
			case "source", "src":
				m.Source = v
			case "target", "dst", "destination":
				m.Target = v
			case "type":
				typ = v
			default:
				return nil, refused(prop+"."+k, "not supported by envd (source, target and type=volume are)")
			}
		}
		switch {
		case typ != "volume":
			return nil, refused(prop+".type", fmt.Sprintf("%q: only type=volume (a project volume); the node's files are not mounted into instances", typ))
		case !volumeName.MatchString(m.Source):
			return nil, invalid(prop+".source", "%q is not a volume name", m.Source)
		case !strings.HasPrefix(m.Target, "/") || strings.Contains(m.Target, "..") || strings.ContainsAny(m.Target, ":,\n\x00"):
			return nil, invalid(prop+".target", "%q is not an absolute path", m.Target)
		}
		out = append(out, m)
	}
	return out, nil
}

var volumeName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// parseCustomizations reads customizations: only envd's, and of it only
// "spec" (an object); other tools' settings are refused by name, since
// envd would not apply them.
func parseCustomizations(raw json.RawMessage) (json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return nil, invalid("customizations", "not an object")
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if k != "envd" {
			return nil, refused("customizations."+k, "settings of another tool are not applied by envd (customizations.envd.spec is)")
		}
	}
	var e map[string]json.RawMessage
	if err := json.Unmarshal(m["envd"], &e); err != nil || e == nil {
		return nil, invalid("customizations.envd", "not an object")
	}
	for _, k := range slices.Sorted(maps.Keys(e)) {
		if k != "spec" {
			return nil, refused("customizations.envd."+k, "not supported by envd (spec is)")
		}
	}
	spec := e["spec"]
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(spec, &obj); err != nil || obj == nil {
		return nil, invalid("customizations.envd.spec", "an envd build spec (an object)")
	}
	for _, k := range []string{"dockerfile", "from", "context", "switch"} {
		if _, ok := obj[k]; ok {
			return nil, refused("customizations.envd.spec."+k, "the spec is built on the devcontainer's image: no dockerfile, from, context or switch in it")
		}
	}
	return spec, nil
}

// parseDocker reads "privileged" and "runArgs", which devcontainers use to
// run Docker inside: privileged true, or runArgs of "--privileged" only,
// ask for it. Other docker run arguments have no meaning on envd.
func parseDocker(top map[string]json.RawMessage) (bool, error) {
	docker := false
	if raw, ok := top["privileged"]; ok {
		if err := json.Unmarshal(raw, &docker); err != nil {
			return false, invalid("privileged", "not a boolean")
		}
	}
	if raw, ok := top["runArgs"]; ok {
		var args []string
		if err := json.Unmarshal(raw, &args); err != nil {
			return false, invalid("runArgs", "not an array of strings")
		}
		for _, a := range args {
			if a != "--privileged" {
				return false, refused("runArgs", fmt.Sprintf("%q: docker run arguments have no meaning on envd (only --privileged, for Docker inside an instance)", a))
			}
			docker = true
		}
	}
	return docker, nil
}
