package mcp

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/errdefs"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Input fields without omitempty are required by the derived schema.

type projectIn struct {
	Project string `json:"project" jsonschema:"the project's name"`
}

type createProjectIn struct {
	Name string `json:"name" jsonschema:"the new project's name"`
	Base string `json:"base" jsonschema:"the base image: a name imported on the server (see envctl image import) or a reference"`
}

type listInstancesIn struct {
	Project string `json:"project,omitempty" jsonschema:"list only this project's instances; all the tenant's when empty"`
}

type createInstanceIn struct {
	Project string `json:"project" jsonschema:"the project to start an instance of"`
	Version int    `json:"version,omitempty" jsonschema:"the version to start from; the project's current when 0 or absent"`
	TTL     string `json:"ttl,omitempty" jsonschema:"lifetime as a Go duration (30m, 2h) or none; the server's default when empty"`
	Retain  bool   `json:"retain,omitempty" jsonschema:"keep the writable layer when the instance stops"`
}

type instanceIn struct {
	Instance string `json:"instance" jsonschema:"the instance's id"`
}

type execIn struct {
	Instance string   `json:"instance" jsonschema:"the instance's id"`
	Command  string   `json:"command,omitempty" jsonschema:"a shell command line, run with /bin/sh -c; give this or args"`
	Args     []string `json:"args,omitempty" jsonschema:"the program and its arguments, run without a shell; give this or command"`
	Cwd      string   `json:"cwd,omitempty" jsonschema:"the working directory; the image's when empty"`
	Env      []string `json:"env,omitempty" jsonschema:"extra environment variables as NAME=value"`
	Stdin    string   `json:"stdin,omitempty" jsonschema:"text written to the command's standard input"`
	Timeout  string   `json:"timeout,omitempty" jsonschema:"a Go duration; the server's default (10m) when empty"`
	Wake     bool     `json:"wake,omitempty" jsonschema:"start a stopped instance first"`
}

type readFileIn struct {
	Instance string `json:"instance" jsonschema:"the instance's id"`
	Path     string `json:"path" jsonschema:"the file's absolute path in the instance"`
	Offset   int64  `json:"offset,omitempty" jsonschema:"the first byte to read"`
	Length   int64  `json:"length,omitempty" jsonschema:"how many bytes to read; up to 1 MiB, the default"`
}

type readFileOut struct {
	Path string `json:"path"`
	// Content is the bytes read, as text when they are UTF-8, else base64
	// (Encoding says which).
	Content  string `json:"content"`
	Encoding string `json:"encoding"`
	Size     int64  `json:"size"`
	// Truncated: the file has bytes past the ones read.
	Truncated bool `json:"truncated,omitempty"`
}

type writeFileIn struct {
	Instance string `json:"instance" jsonschema:"the instance's id"`
	Path     string `json:"path" jsonschema:"the file's absolute path in the instance"`
	Content  string `json:"content" jsonschema:"the file's new content"`
	Encoding string `json:"encoding,omitempty" jsonschema:"utf-8 (the default) or base64"`
	Mode     string `json:"mode,omitempty" jsonschema:"permission bits in octal (0644); kept or 0644 when empty"`
	Mkdir    bool   `json:"mkdir,omitempty" jsonschema:"create missing parent directories"`
}

type listFilesIn struct {
	Instance string `json:"instance" jsonschema:"the instance's id"`
	Path     string `json:"path" jsonschema:"the directory's absolute path in the instance"`
}

type saveIn struct {
	Instance string `json:"instance" jsonschema:"the instance to save"`
	Message  string `json:"message,omitempty" jsonschema:"the version's message"`
}

type switchIn struct {
	Project         string `json:"project" jsonschema:"the project"`
	Version         int    `json:"version" jsonschema:"the ready version to make current"`
	ExpectedCurrent *int   `json:"expected_current,omitempty" jsonschema:"refuse with conflict unless this is still the current version (0: none); the current version read just before when absent"`
}

type rollbackIn struct {
	Project string `json:"project" jsonschema:"the project"`
	Version int    `json:"version,omitempty" jsonschema:"the version to roll back to; the current version's parent when 0 or absent"`
}

type forkIn struct {
	Instance string `json:"instance" jsonschema:"the instance to fork"`
	Message  string `json:"message,omitempty" jsonschema:"the message of the version the fork saves"`
	TTL      string `json:"ttl,omitempty" jsonschema:"the new instances' lifetime, as in create_instance"`
	Memory   bool   `json:"memory,omitempty" jsonschema:"fork the running processes too (gvisor runtime class): every new instance continues them"`
	Count    int    `json:"count,omitempty" jsonschema:"how many new instances, 1 to 16; 1 when 0 or absent"`
}

type diffIn struct {
	Project  string `json:"project,omitempty" jsonschema:"with version: the project whose versions to compare"`
	Version  int    `json:"version,omitempty" jsonschema:"the newer version"`
	Against  int    `json:"against,omitempty" jsonschema:"the older version; the newer one's parent when 0 or absent"`
	Instance string `json:"instance,omitempty" jsonschema:"instead of project and version: what a save of this instance would capture now"`
	Limit    int    `json:"limit,omitempty" jsonschema:"at most this many paths in each list; the server's default when 0"`
}

type previewIn struct {
	Instance string `json:"instance" jsonschema:"the instance's id"`
	Port     int    `json:"port" jsonschema:"the TCP port the instance listens on"`
	TTL      string `json:"ttl,omitempty" jsonschema:"the link's lifetime as a Go duration; 1h when empty"`
}

type previewOut struct {
	types.PreviewToken
	// ProxyURL is the path-form URL on the API; requests to it need the
	// caller's API token as a bearer token.
	ProxyURL string `json:"proxy_url"`
}

// readLimit bounds what read_file returns in one call: a model's context
// is the consumer, and larger files are read by ranges.
const readLimit = 1 << 20

type tools struct{ c *client.Client }

func invalid(format string, a ...any) error {
	return fmt.Errorf(format+": %w", append(a, errdefs.ErrInvalidArgument)...)
}

func addTools(s *sdk.Server, t tools) {
	add(s, "list_projects", "List the caller's projects, with each one's current version.", t.listProjects)
	add(s, "create_project", "Create a project from a base image.", t.createProject)
	add(s, "list_instances", "List the caller's instances (of one project, or all).", t.listInstances)
	add(s, "create_instance", "Start an instance of a project, from its current version or a given one; "+
		"a warm pool's ready instance is claimed when the project has one. Answers the running instance.", t.createInstance)
	add(s, "get_instance", "Show an instance: state, version it started from, expiry, address.", t.getInstance)
	add(s, "delete_instance", "Remove an instance. Unsaved changes in it are lost; save_version first to keep them.", t.deleteInstance)
	add(s, "exec", "Run a command in a running instance and wait for it; answers exit_code, stdout and stderr. "+
		"A non-zero exit code is a result, not a tool error.", t.exec)
	add(s, "read_file", "Read a file of an instance (up to 1 MiB per call; use offset and length for more).", t.readFile)
	add(s, "write_file", "Write a file in an instance atomically (replacing it).", t.writeFile)
	add(s, "list_files", "List a directory of an instance.", t.listFiles)
	add(s, "save_version", "Save the instance's changes as the project's next version and wait for it; "+
		"the version becomes current unless another save moved current meanwhile (conflict: true).", t.save)
	add(s, "list_versions", "List a project's versions, newest last, with which one is current.", t.listVersions)
	add(s, "switch_version", "Make a ready version the project's current one (new instances start from it).", t.switchVersion)
	add(s, "rollback", "Move the project's current version back: to the current version's parent, or to a given version. "+
		"Refused with conflict if current moved meanwhile.", t.rollback)
	add(s, "fork_instance", "Save the instance as a version that is not current and start new instances from it (count, default 1; "+
		"memory: with its running processes); answers the version and the new instances.", t.fork)
	add(s, "diff", "What changed: between a version and its parent (or another version), or in an instance since its version "+
		"(what a save would capture). Answers added, modified and deleted paths and package changes.", t.diff)
	add(s, "preview_link", "Make a signed link to a TCP port an instance listens on (an HTTP server in it).", t.preview)
}

func (t tools) listProjects(ctx context.Context, _ struct{}) (any, error) {
	ps, err := t.c.ListProjects(ctx)
	return map[string]any{"projects": nonNil(ps)}, err
}

func (t tools) createProject(ctx context.Context, in createProjectIn) (any, error) {
	return t.c.CreateProject(ctx, types.CreateProjectRequest{Name: in.Name, Base: in.Base})
}

func (t tools) listInstances(ctx context.Context, in listInstancesIn) (any, error) {
	is, err := t.c.ListInstances(ctx, in.Project)
	return map[string]any{"instances": nonNil(is)}, err
}

func (t tools) createInstance(ctx context.Context, in createInstanceIn) (any, error) {
	return t.c.CreateInstance(ctx, in.Project, types.CreateInstanceRequest{Version: in.Version, TTL: in.TTL, Retain: in.Retain})
}

func (t tools) getInstance(ctx context.Context, in instanceIn) (any, error) {
	return t.c.GetInstance(ctx, in.Instance)
}

func (t tools) deleteInstance(ctx context.Context, in instanceIn) (any, error) {
	return t.c.DeleteInstance(ctx, in.Instance)
}

func (t tools) exec(ctx context.Context, in execIn) (any, error) {
	args := in.Args
	switch {
	case in.Command != "" && len(in.Args) > 0:
		return nil, invalid("give command or args, not both")
	case in.Command != "":
		args = []string{"/bin/sh", "-c", in.Command}
	case len(in.Args) == 0:
		return nil, invalid("give command (a shell command line) or args (a program and its arguments)")
	}
	return t.c.Exec(ctx, in.Instance, types.ExecRequest{Args: args, Cwd: in.Cwd, Env: in.Env, Stdin: in.Stdin, Timeout: in.Timeout, Wake: in.Wake})
}

func (t tools) readFile(ctx context.Context, in readFileIn) (any, error) {
	if in.Offset < 0 || in.Length < 0 {
		return nil, invalid("offset %d, length %d: must not be negative", in.Offset, in.Length)
	}
	n := in.Length
	if n == 0 || n > readLimit {
		n = readLimit
	}
	// One byte more than asked tells whether the file goes on.
	r, err := t.c.ReadFile(ctx, in.Instance, in.Path, in.Offset, n+1)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	if r.Dir {
		return nil, fmt.Errorf("path %q is a directory (use list_files): %w", in.Path, errdefs.ErrFailedPrecondition)
	}
	b, err := io.ReadAll(io.LimitReader(r, n+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", in.Path, err)
	}
	out := readFileOut{Path: in.Path, Truncated: int64(len(b)) > n}
	if out.Truncated {
		b = b[:n]
	}
	out.Size = int64(len(b))
	if utf8.Valid(b) {
		out.Content, out.Encoding = string(b), "utf-8"
	} else {
		out.Content, out.Encoding = base64.StdEncoding.EncodeToString(b), "base64"
	}
	return out, nil
}

func (t tools) writeFile(ctx context.Context, in writeFileIn) (any, error) {
	var content io.Reader
	switch strings.ToLower(in.Encoding) {
	case "", "utf-8", "utf8", "text":
		content = strings.NewReader(in.Content)
	case "base64":
		b, err := base64.StdEncoding.DecodeString(in.Content)
		if err != nil {
			return nil, invalid("content is not base64: %v", err)
		}
		content = strings.NewReader(string(b))
	default:
		return nil, invalid("encoding %q: want utf-8 or base64", in.Encoding)
	}
	var opts []client.FileOption
	if in.Mode != "" {
		var mode uint32
		if _, err := fmt.Sscanf(in.Mode, "%o", &mode); err != nil || mode > 0o7777 {
			return nil, invalid("mode %q: want octal permission bits such as 0644", in.Mode)
		}
		opts = append(opts, client.WithMode(mode))
	}
	if in.Mkdir {
		opts = append(opts, client.WithMkdir())
	}
	return t.c.WriteFile(ctx, in.Instance, in.Path, content, opts...)
}

func (t tools) listFiles(ctx context.Context, in listFilesIn) (any, error) {
	return t.c.ListFiles(ctx, in.Instance, in.Path)
}

func (t tools) save(ctx context.Context, in saveIn) (any, error) {
	op, err := t.c.Save(ctx, in.Instance, types.SaveRequest{Message: in.Message}, "")
	if err != nil {
		return nil, err
	}
	var res types.SaveResult
	return res, t.wait(ctx, op, &res)
}

func (t tools) listVersions(ctx context.Context, in projectIn) (any, error) {
	vs, err := t.c.ListVersions(ctx, in.Project)
	return map[string]any{"versions": nonNil(vs)}, err
}

func (t tools) switchVersion(ctx context.Context, in switchIn) (any, error) {
	expected := in.ExpectedCurrent
	if expected == nil {
		p, err := t.c.GetProject(ctx, in.Project)
		if err != nil {
			return nil, err
		}
		expected = &p.Current
	}
	return t.c.SetCurrent(ctx, in.Project, types.SetCurrentRequest{Version: in.Version, ExpectedCurrent: expected})
}

func (t tools) rollback(ctx context.Context, in rollbackIn) (any, error) {
	p, err := t.c.GetProject(ctx, in.Project)
	if err != nil {
		return nil, err
	}
	cur := p.Current
	to := in.Version
	if to == 0 {
		v, err := t.c.GetVersion(ctx, in.Project, cur)
		if err != nil {
			return nil, err
		}
		if v.Parent == 0 {
			return nil, fmt.Errorf("version %d of project %q has no parent to roll back to: %w", cur, in.Project, errdefs.ErrFailedPrecondition)
		}
		to = v.Parent
	}
	// The swap expects the current version read above: a save or switch
	// since then wins, and this answers conflict rather than undo it.
	return t.c.SetCurrent(ctx, in.Project, types.SetCurrentRequest{Version: to, ExpectedCurrent: &cur})
}

func (t tools) fork(ctx context.Context, in forkIn) (any, error) {
	op, err := t.c.Fork(ctx, in.Instance, types.ForkRequest{Message: in.Message, TTL: in.TTL, Memory: in.Memory, Count: in.Count}, "")
	if err != nil {
		return nil, err
	}
	var res types.ForkResult
	return res, t.wait(ctx, op, &res)
}

func (t tools) diff(ctx context.Context, in diffIn) (any, error) {
	switch {
	case in.Instance != "" && (in.Project != "" || in.Version != 0 || in.Against != 0):
		return nil, invalid("give instance, or project and version, not both")
	case in.Instance != "":
		return t.c.InstanceChanges(ctx, in.Instance, in.Limit)
	case in.Project == "" || in.Version <= 0:
		return nil, invalid("give project and version (a version number from 1), or instance")
	}
	return t.c.VersionChanges(ctx, in.Project, in.Version, in.Against, in.Limit)
}

func (t tools) preview(ctx context.Context, in previewIn) (any, error) {
	pt, err := t.c.PreviewToken(ctx, in.Instance, in.Port, in.TTL)
	if err != nil {
		return nil, err
	}
	return previewOut{PreviewToken: pt, ProxyURL: t.c.PortURL(in.Instance, in.Port, "/")}, nil
}

// wait follows op to its end and decodes its result into out; a failed or
// canceled operation is its error, with the operation's code.
func (t tools) wait(ctx context.Context, op types.Operation, out any) error {
	op, err := t.c.WaitOperation(ctx, op.ID, nil)
	if err != nil {
		return err
	}
	if op.State != types.OpSucceeded {
		e := &types.Error{Code: "internal", Message: fmt.Sprintf("operation %s %s", op.ID, op.State)}
		if op.Error != nil {
			e.Code, e.Message = op.Error.Code, op.Error.Message
		}
		e.Details = map[string]any{"operation": op.ID}
		return e
	}
	if err := json.Unmarshal(op.Result, out); err != nil {
		return fmt.Errorf("operation %s: decode result: %w", op.ID, err)
	}
	return nil
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
