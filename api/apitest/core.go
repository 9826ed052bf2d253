// Package apitest provides a scriptable api.Core for tests of the HTTP layer
// and of its clients (package client, envctl).
//
// It is not a model of envd: every method records its call and answers a
// plain echo of its input, or what its Func field answers where a test
// needs another answer (an error, mostly). Operations are the exception:
// the fake keeps an in-memory log per operation (NewOperation, AppendEvent,
// Finish) so that event streams can be tested. Behaviour of the real
// service is tested against *envd.Service.
package apitest

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/envd-dev/envd/api/types"

	"github.com/envd-dev/envd/api"
	"github.com/envd-dev/envd/api/errdefs"
)

// Token is the bearer token a new Core accepts.
const Token = "test-token"

// Epoch is the time stamp of everything the fake creates.
var Epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// Call is one recorded call: the method name, the principal (zero for
// Authenticate and Info) and the arguments after it.
type Call struct {
	Method    string
	Principal types.Principal
	Args      []any
}

// Core is the fake. The zero value is not usable; call New.
type Core struct {
	// Token is the accepted bearer token; Principal is who it belongs to.
	Token     string
	Principal types.Principal

	// Set before the first request, a Func answers instead of the echo.
	GetProjectFunc     func(ctx context.Context, name string) (types.Project, error)
	CreateInstanceFunc func(ctx context.Context, project string, req types.CreateInstanceRequest, key string) (types.Instance, error)
	RestoreFunc        func(ctx context.Context, project string, req types.CreateInstanceRequest, key string) (types.Operation, error)
	GetInstanceFunc    func(ctx context.Context, id string) (types.Instance, error)
	StartInstanceFunc  func(ctx context.Context, id string) (types.Instance, error)
	PauseInstanceFunc  func(ctx context.Context, id string) (types.Instance, error)
	ResumeInstanceFunc func(ctx context.Context, id string) (types.Instance, error)
	ExecFunc           func(ctx context.Context, id string, req types.ExecRequest) (types.ExecResult, error)
	// ExecStreamFunc scripts a streaming exec. Without it the fake echoes
	// stdin to stdout until stdin ends, records the sizes received (Sizes)
	// and returns exit code 0.
	ExecStreamFunc   func(ctx context.Context, id string, req types.ExecRequest, stdio types.Stdio) (int, error)
	SaveFunc         func(ctx context.Context, id string, req types.SaveRequest, key string) (types.Operation, error)
	ListVersionsFunc func(ctx context.Context, project string) ([]types.Version, error)
	SetCurrentFunc   func(ctx context.Context, project string, req types.SetCurrentRequest) (types.Project, error)
	GCFunc           func(ctx context.Context, req types.GCRequest, key string) (types.Operation, error)
	WakeInstanceFunc func(ctx context.Context, id string) (types.Instance, error)
	// InstanceOwnerFunc says which node answers for an instance; without
	// it every instance is this node's.
	InstanceOwnerFunc func(ctx context.Context, id string) (node, apiURL string, local bool, err error)
	MigrateFunc       func(ctx context.Context, project string, req types.MigrateRequest, key string) (types.Operation, error)

	mu    sync.Mutex
	calls []Call
	sizes []types.TermSize
	ops   map[string]*opLog
	nOps  int

	// DialInstanceFunc, when set, is DialInstance (ports.go).
	DialInstanceFunc func(ctx context.Context, id string, port int) (net.Conn, error)

	joined bool // a join with JoinToken was answered (jointokens.go)
}

var _ api.Core = (*Core)(nil)

type opLog struct {
	op     types.Operation
	events []types.Event
}

// New returns a fake that accepts Token for an admin of tenant "t1".
func New() *Core {
	return &Core{
		Token:     Token,
		Principal: types.Principal{Tenant: "t1", Admin: true},
		ops:       map[string]*opLog{},
	}
}

func (c *Core) record(method string, p types.Principal, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, Call{Method: method, Principal: p, Args: args})
}

// echo records the call and answers v.
func echo[T any](c *Core, method string, p types.Principal, v T, args ...any) (T, error) {
	c.record(method, p, args...)
	return v, nil
}

// Calls returns the calls so far, oldest first.
func (c *Core) Calls() []Call {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Call(nil), c.calls...)
}

// LastCall returns the newest call of method.
func (c *Core) LastCall(method string) (Call, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := len(c.calls) - 1; i >= 0; i-- {
		if c.calls[i].Method == method {
			return c.calls[i], true
		}
	}
	return Call{}, false
}

func (c *Core) Authenticate(ctx context.Context, token string) (types.Principal, error) {
	c.record("Authenticate", types.Principal{}, token)
	if subtle.ConstantTimeCompare([]byte(token), []byte(c.Token)) != 1 {
		return types.Principal{}, fmt.Errorf("token: %w", errdefs.ErrUnauthenticated)
	}
	return c.Principal, nil
}

// NodeCore.

func (c *Core) Info(ctx context.Context) (types.Info, error) {
	return echo(c, "Info", types.Principal{}, types.Info{Version: "test", Node: "node-1", Registry: "127.0.0.1:5000",
		Components: map[string]string{"containerd": "v2.4.2"}})
}

// GC starts a running operation of kind "gc".
func (c *Core) GC(ctx context.Context, p types.Principal, req types.GCRequest, key string) (types.Operation, error) {
	c.record("GC", p, req, key)
	if c.GCFunc != nil {
		return c.GCFunc(ctx, req, key)
	}
	return c.NewOperation("gc", "registry"), nil
}

// ImageCore.

// ImportImage reads the whole tarball; the recorded arguments are the name
// and the bytes read.
// PullImage answers an image whose digest is the sha256 of ref.
func (c *Core) PullImage(ctx context.Context, p types.Principal, name, ref string) (types.Image, error) {
	sum := sha256.Sum256([]byte(ref))
	d := "sha256:" + hex.EncodeToString(sum[:])
	return echo(c, "PullImage", p, types.Image{Name: name, Ref: "images/" + name + "@" + d, Digest: d}, name, ref)
}

func (c *Core) ImportImage(ctx context.Context, p types.Principal, name string, tarball io.Reader) (types.Image, error) {
	b, err := io.ReadAll(tarball)
	c.record("ImportImage", p, name, b)
	if err != nil {
		return types.Image{}, err
	}
	sum := sha256.Sum256(b)
	d := "sha256:" + hex.EncodeToString(sum[:])
	return types.Image{Name: name, Ref: "images/" + name + "@" + d, Digest: d, Size: int64(len(b))}, nil
}

func (c *Core) ListImages(ctx context.Context, p types.Principal) ([]types.Image, error) {
	return echo(c, "ListImages", p, []types.Image(nil))
}

// ProjectCore.

func (c *Core) CreateProject(ctx context.Context, p types.Principal, req types.CreateProjectRequest, key string) (types.Project, error) {
	comp := req.Compression
	if comp == "" {
		comp = "estargz"
	}
	return echo(c, "CreateProject", p, types.Project{Name: req.Name, BaseImage: req.Base, Current: 1, Excludes: req.Excludes,
		Compression: comp, CreatedAt: Epoch}, req, key)
}

func (c *Core) ListProjects(ctx context.Context, p types.Principal) ([]types.Project, error) {
	return echo(c, "ListProjects", p, []types.Project(nil))
}

func (c *Core) GetProject(ctx context.Context, p types.Principal, name string) (types.Project, error) {
	c.record("GetProject", p, name)
	if c.GetProjectFunc != nil {
		return c.GetProjectFunc(ctx, name)
	}
	return types.Project{Name: name, BaseImage: "busybox", Current: 1, Compression: "estargz", CreatedAt: Epoch}, nil
}

func (c *Core) DeleteProject(ctx context.Context, p types.Principal, name string) error {
	_, err := echo(c, "DeleteProject", p, 0, name)
	return err
}

func (c *Core) SetRetention(ctx context.Context, p types.Principal, project string, r types.Retention) (types.Project, error) {
	return echo(c, "SetRetention", p, types.Project{Name: project, Current: 1, Retention: &r, CreatedAt: Epoch}, project, r)
}

func (c *Core) SetProjectLimits(ctx context.Context, p types.Principal, project string, l types.Limits) (types.Project, error) {
	return echo(c, "SetProjectLimits", p, types.Project{Name: project, Current: 1, Limits: &l, CreatedAt: Epoch}, project, l)
}

// SetProjectNetwork answers the policy with egress "" as "open".
func (c *Core) SetProjectNetwork(ctx context.Context, p types.Principal, project string, n types.ProjectNetwork) (types.Project, error) {
	egress := n.Egress
	if egress == "" {
		egress = "open"
	}
	return echo(c, "SetProjectNetwork", p, types.Project{Name: project, Current: 1, Egress: egress,
		IsolateInstances: n.IsolateInstances, CreatedAt: Epoch}, project, n)
}

// InstanceCore.

// instanceIn is the fake's instance id in state, entered for reason.
func instanceIn(id string, state types.InstanceState, reason string) types.Instance {
	return types.Instance{ID: id, Project: "p", Node: "node-1", Version: 1, Generation: 1,
		State: state, Reason: reason, CreatedAt: Epoch, LastTransitionAt: Epoch}
}

// verb records a lifecycle call and answers f's instance, else in.
func (c *Core) verb(ctx context.Context, method string, p types.Principal, id string,
	f func(context.Context, string) (types.Instance, error), in types.Instance) (types.Instance, error) {
	c.record(method, p, id)
	if f != nil {
		return f(ctx, id)
	}
	return in, nil
}

// CreateInstance answers instance "i-1" of the project, running.
func (c *Core) CreateInstance(ctx context.Context, p types.Principal, project string, req types.CreateInstanceRequest, key string) (types.Instance, error) {
	c.record("CreateInstance", p, project, req, key)
	if c.CreateInstanceFunc != nil {
		return c.CreateInstanceFunc(ctx, project, req, key)
	}
	in := instanceIn("i-1", types.StateRunning, types.ReasonStarted)
	in.Project, in.Version, in.Retain = project, req.Version, req.Retain
	if in.Version == 0 {
		in.Version = 1
	}
	return in, nil
}

// Restore starts a running operation of kind "restore" on a new instance.
func (c *Core) Restore(ctx context.Context, p types.Principal, project string, req types.CreateInstanceRequest, key string) (types.Operation, error) {
	c.record("Restore", p, project, req, key)
	if c.RestoreFunc != nil {
		return c.RestoreFunc(ctx, project, req, key)
	}
	return c.NewOperation("restore", project+"-i1"), nil
}

func (c *Core) ListInstances(ctx context.Context, p types.Principal, project string) ([]types.Instance, error) {
	return echo(c, "ListInstances", p, []types.Instance(nil), project)
}

func (c *Core) GetInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error) {
	return c.verb(ctx, "GetInstance", p, id, c.GetInstanceFunc, instanceIn(id, types.StateRunning, types.ReasonStarted))
}

func (c *Core) DeleteInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error) {
	return c.verb(ctx, "DeleteInstance", p, id, nil, instanceIn(id, types.StateTerminated, types.ReasonUserDelete))
}

// LifecycleCore: each verb answers the instance in the state it leads to.

func (c *Core) StopInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error) {
	return c.verb(ctx, "StopInstance", p, id, nil, instanceIn(id, types.StateStopped, types.ReasonUserStop))
}

func (c *Core) StartInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error) {
	in := instanceIn(id, types.StateRunning, types.ReasonStarted)
	in.Generation = 2
	return c.verb(ctx, "StartInstance", p, id, c.StartInstanceFunc, in)
}

func (c *Core) PauseInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error) {
	return c.verb(ctx, "PauseInstance", p, id, c.PauseInstanceFunc, instanceIn(id, types.StatePaused, types.ReasonUserPause))
}

func (c *Core) ResumeInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error) {
	return c.verb(ctx, "ResumeInstance", p, id, c.ResumeInstanceFunc, instanceIn(id, types.StateRunning, types.ReasonUserResume))
}

// HibernateInstance answers a Stopped instance hibernated as version 2.
func (c *Core) HibernateInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error) {
	in := instanceIn(id, types.StateStopped, "hibernated")
	in.HibernatedVersion = 2
	return c.verb(ctx, "HibernateInstance", p, id, nil, in)
}

// RenewInstance answers a Running instance expiring at Epoch + ttl, or
// never with "none".
func (c *Core) RenewInstance(ctx context.Context, p types.Principal, id, ttl string) (types.Instance, error) {
	c.record("RenewInstance", p, id, ttl)
	in := instanceIn(id, types.StateRunning, types.ReasonStarted)
	if ttl == "none" {
		return in, nil
	}
	d, err := time.ParseDuration(ttl)
	if err != nil || d <= 0 {
		return types.Instance{}, fmt.Errorf("ttl %q: %w", ttl, errdefs.ErrInvalidArgument)
	}
	at := Epoch.Add(d)
	in.ExpiresAt = &at
	return in, nil
}

// ExecCore.

// Exec answers the arguments as stdout.
func (c *Core) Exec(ctx context.Context, p types.Principal, id string, req types.ExecRequest) (types.ExecResult, error) {
	c.record("Exec", p, id, req)
	if c.ExecFunc != nil {
		return c.ExecFunc(ctx, id, req)
	}
	return types.ExecResult{Stdout: fmt.Sprintln(req.Args)}, nil
}

// ExecStream records the id, the request and whether a TTY was asked for.
func (c *Core) ExecStream(ctx context.Context, p types.Principal, id string, req types.ExecRequest, stdio types.Stdio) (int, error) {
	c.record("ExecStream", p, id, req, stdio.TTY)
	if c.ExecStreamFunc != nil {
		return c.ExecStreamFunc(ctx, id, req, stdio)
	}
	done := make(chan struct{})
	defer close(done)
	if stdio.Resize != nil {
		go func() {
			for {
				select {
				case sz, ok := <-stdio.Resize:
					if !ok {
						return
					}
					c.mu.Lock()
					c.sizes = append(c.sizes, sz)
					c.mu.Unlock()
				case <-done:
					return
				}
			}
		}()
	}
	if stdio.Stdin == nil {
		return 0, nil
	}
	out := stdio.Stdout
	if out == nil {
		out = io.Discard
	}
	if _, err := io.Copy(out, stdio.Stdin); err != nil {
		if ctx.Err() != nil {
			return -1, ctx.Err()
		}
		return -1, err
	}
	return 0, nil
}

// SizeAtStart makes ExecStream answer exit code 0 at once, after looking
// for a terminal size already waiting on stdio.Resize when it was called:
// the channel returned delivers that size, or is closed when there was none.
func (c *Core) SizeAtStart() <-chan types.TermSize {
	atStart := make(chan types.TermSize, 1)
	c.ExecStreamFunc = func(_ context.Context, _ string, _ types.ExecRequest, stdio types.Stdio) (int, error) {
		select {
		case sz := <-stdio.Resize:
			atStart <- sz
		default:
			close(atStart)
		}
		return 0, nil
	}
	return atStart
}

// Sizes returns the terminal sizes the default ExecStream received.
func (c *Core) Sizes() []types.TermSize {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]types.TermSize(nil), c.sizes...)
}

// VersionCore. Save, Build and Migrate start running operations.

func (c *Core) Save(ctx context.Context, p types.Principal, id string, req types.SaveRequest, key string) (types.Operation, error) {
	c.record("Save", p, id, req, key)
	if c.SaveFunc != nil {
		return c.SaveFunc(ctx, id, req, key)
	}
	return c.NewOperation("save", id), nil
}

func (c *Core) Fork(ctx context.Context, p types.Principal, id string, req types.ForkRequest, key string) (types.Operation, error) {
	return echo(c, "Fork", p, c.NewOperation(types.OpKindFork, id), id, req, key)
}

func (c *Core) Build(ctx context.Context, p types.Principal, project string, req types.BuildRequest, key string) (types.Operation, error) {
	return echo(c, "Build", p, c.NewOperation("build", project), project, req, key)
}

func (c *Core) Migrate(ctx context.Context, p types.Principal, project string, req types.MigrateRequest, key string) (types.Operation, error) {
	if c.MigrateFunc != nil {
		c.record("Migrate", p, project, req, key)
		return c.MigrateFunc(ctx, project, req, key)
	}
	return echo(c, "Migrate", p, c.NewOperation("migrate", project), project, req, key)
}

func (c *Core) ListVersions(ctx context.Context, p types.Principal, project string) ([]types.Version, error) {
	c.record("ListVersions", p, project)
	if c.ListVersionsFunc != nil {
		return c.ListVersionsFunc(ctx, project)
	}
	return nil, nil
}

func (c *Core) GetVersion(ctx context.Context, p types.Principal, project string, n int) (types.Version, error) {
	return echo(c, "GetVersion", p, types.Version{Project: project, Number: n, Kind: "snapshot", State: "ready", CreatedAt: Epoch}, project, n)
}

func (c *Core) SetCurrent(ctx context.Context, p types.Principal, project string, req types.SetCurrentRequest) (types.Project, error) {
	c.record("SetCurrent", p, project, req)
	if c.SetCurrentFunc != nil {
		return c.SetCurrentFunc(ctx, project, req)
	}
	return types.Project{Name: project, Current: req.Version, CreatedAt: Epoch}, nil
}

func (c *Core) PinVersion(ctx context.Context, p types.Principal, project string, n int, pinned bool) (types.Version, error) {
	return echo(c, "PinVersion", p, types.Version{Project: project, Number: n, Kind: "snapshot", State: "ready", Pinned: pinned,
		CreatedAt: Epoch}, project, n, pinned)
}

// VersionChanges answers no changes between the two versions.
func (c *Core) VersionChanges(ctx context.Context, p types.Principal, project string, n, against, limit int) (types.Changes, error) {
	return echo(c, "VersionChanges", p, types.Changes{Project: project, Version: n, Against: against,
		Added: []types.FileChange{}, Modified: []types.FileChange{}, Deleted: []types.FileChange{},
		Summarized: []types.DirSummary{}, TopDirs: []types.DirBytes{}}, project, n, against, limit)
}

// InstanceChanges answers no changes against version 1.
func (c *Core) InstanceChanges(ctx context.Context, p types.Principal, id string, limit int) (types.Changes, error) {
	return echo(c, "InstanceChanges", p, types.Changes{Project: "p", Instance: id, Against: 1,
		Added: []types.FileChange{}, Modified: []types.FileChange{}, Deleted: []types.FileChange{},
		Summarized: []types.DirSummary{}, TopDirs: []types.DirBytes{},
		Excluded: []types.ExcludedPath{{Path: "/proc", Reason: "runtime mount point"}}}, id, limit)
}

// ExportVersion writes "oci layout of PROJECT-N" as the export.
func (c *Core) ExportVersion(ctx context.Context, p types.Principal, project string, n int, w io.Writer) error {
	_, err := echo(c, "ExportVersion", p, struct{}{}, project, n)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "oci layout of %s-%d", project, n)
	return err
}

// VolumeCore.

func (c *Core) ListVolumes(ctx context.Context, p types.Principal, project string) ([]types.Volume, error) {
	return echo(c, "ListVolumes", p, []types.Volume(nil), project)
}

// AddVolume answers the project with the spec as its only volume's name.
func (c *Core) AddVolume(ctx context.Context, p types.Principal, project string, req types.AddVolumeRequest) (types.Project, error) {
	return echo(c, "AddVolume", p, types.Project{Name: project, Volumes: []types.Volume{{Name: req.Spec}}, CreatedAt: Epoch}, project, req)
}

func (c *Core) RemoveVolume(ctx context.Context, p types.Principal, project, name string) (types.Project, error) {
	return echo(c, "RemoveVolume", p, types.Project{Name: project, CreatedAt: Epoch}, project, name)
}

func (c *Core) ArchiveVolume(ctx context.Context, p types.Principal, project, name string, req types.VolumeArchiveRequest) (types.VolumeArchive, error) {
	return echo(c, "ArchiveVolume", p, types.VolumeArchive{Key: req.Key, Bytes: 1, Files: 1}, project, name, req)
}

func (c *Core) RestoreVolume(ctx context.Context, p types.Principal, project, name string, req types.VolumeArchiveRequest) (types.Volume, error) {
	return echo(c, "RestoreVolume", p, types.Volume{Name: name}, project, name, req)
}

// ListArchives answers one archive named "a1" of the volume ("work" for
// all volumes).
func (c *Core) ListArchives(ctx context.Context, p types.Principal, project, volume string) ([]types.VolumeArchive, error) {
	c.record("ListArchives", p, project, volume)
	if volume == "" {
		volume = "work"
	}
	return []types.VolumeArchive{{Key: "volumes/" + p.Tenant + "/" + project + "/" + volume + "/a1/0123456789abcdef.tar.zst",
		Bytes: 2048, Files: 3, Name: "a1", Project: project, Volume: volume, Node: "node-1", CreatedAt: Epoch}}, nil
}

func (c *Core) DeleteArchive(ctx context.Context, p types.Principal, project, volume, name string) (types.VolumeArchive, error) {
	return echo(c, "DeleteArchive", p, types.VolumeArchive{Name: name, Project: project, Volume: volume, CreatedAt: Epoch}, project, volume, name)
}

// OperationCore: an in-memory log per operation.

// NewOperation adds a running operation and returns it.
func (c *Core) NewOperation(kind types.OpKind, target string) types.Operation {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nOps++
	op := types.Operation{
		ID: fmt.Sprintf("op-%d", c.nOps), Kind: kind, Target: target, State: types.OpRunning,
		CreatedAt: Epoch, UpdatedAt: Epoch,
	}
	c.ops[op.ID] = &opLog{op: op}
	return op
}

// AppendEvent appends an event to the operation's log and returns it. It
// panics when the operation does not exist.
func (c *Core) AppendEvent(id, typ, message string) types.Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.ops[id]
	ev := types.Event{Seq: len(l.events) + 1, At: Epoch, Type: typ, Message: message}
	l.events = append(l.events, ev)
	return ev
}

// Finish moves the operation to a terminal state with a result (marshalled
// to JSON when not nil) or an error.
func (c *Core) Finish(id string, state types.OpState, result any, opErr *types.OpError) types.Operation {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.ops[id]
	l.op.State = state
	l.op.Error = opErr
	if result != nil {
		b, err := json.Marshal(result)
		if err != nil {
			panic(err)
		}
		l.op.Result = b
	}
	return l.op
}

// opLog returns the log of operation id under c.mu.
func (c *Core) opLog(id string) (*opLog, error) {
	l, ok := c.ops[id]
	if !ok {
		return nil, fmt.Errorf("operation %q: %w", id, errdefs.ErrNotFound)
	}
	return l, nil
}

func (c *Core) GetOperation(ctx context.Context, p types.Principal, id string) (types.Operation, error) {
	c.record("GetOperation", p, id)
	c.mu.Lock()
	defer c.mu.Unlock()
	l, err := c.opLog(id)
	if err != nil {
		return types.Operation{}, err
	}
	return l.op, nil
}

// CancelOperation moves a running operation to canceled.
func (c *Core) CancelOperation(ctx context.Context, p types.Principal, id string) (types.Operation, error) {
	c.record("CancelOperation", p, id)
	c.mu.Lock()
	defer c.mu.Unlock()
	l, err := c.opLog(id)
	if err != nil {
		return types.Operation{}, err
	}
	if !l.op.Done() {
		l.op.State = types.OpCanceled
		l.events = append(l.events, types.Event{Seq: len(l.events) + 1, At: Epoch, Type: "canceled", Message: "canceled by request"})
	}
	return l.op, nil
}

func (c *Core) OperationEvents(ctx context.Context, p types.Principal, id string, after int) ([]types.Event, error) {
	c.record("OperationEvents", p, id, after)
	c.mu.Lock()
	defer c.mu.Unlock()
	l, err := c.opLog(id)
	if err != nil {
		return nil, err
	}
	var out []types.Event
	for _, ev := range l.events {
		if ev.Seq > after {
			out = append(out, ev)
		}
	}
	return out, nil
}

// TenantCore.

func (c *Core) SetQuota(ctx context.Context, p types.Principal, tenant string, q types.Quota) (types.Quota, error) {
	return echo(c, "SetQuota", p, q, tenant, q)
}

// Usage answers an empty usage of the tenant ("" = the caller's).
func (c *Core) Usage(ctx context.Context, p types.Principal, tenant string) (types.Usage, error) {
	u := types.Usage{Tenant: tenant, Versions: map[string]int{}}
	if tenant == "" {
		u.Tenant = p.Tenant
	}
	return echo(c, "Usage", p, u, tenant)
}

// CreateToken answers a fixed token of the tenant.
func (c *Core) CreateToken(ctx context.Context, p types.Principal, tenant string, req types.CreateTokenRequest) (types.Token, error) {
	return echo(c, "CreateToken", p, types.Token{Tenant: tenant, Token: "tok-" + tenant, Admin: req.Admin}, tenant, req)
}

// ListTokens answers two tokens of the tenant (tenant "t1" for ""): id 1
// an admin token, id 2 a plain one that expires a day after Epoch.
func (c *Core) ListTokens(ctx context.Context, p types.Principal, tenant string) ([]types.TokenInfo, error) {
	c.record("ListTokens", p, tenant)
	if tenant == "" {
		tenant = "t1"
	}
	exp := Epoch.Add(24 * time.Hour)
	return []types.TokenInfo{
		{ID: 1, Tenant: tenant, Admin: true, CreatedAt: Epoch, LastUsedAt: &Epoch},
		{ID: 2, Tenant: tenant, CreatedAt: Epoch, ExpiresAt: &exp},
	}, nil
}

// RevokeToken answers token id of the caller's tenant, revoked at Epoch.
func (c *Core) RevokeToken(ctx context.Context, p types.Principal, id int64) (types.TokenInfo, error) {
	return echo(c, "RevokeToken", p, types.TokenInfo{ID: id, Tenant: p.Tenant, CreatedAt: Epoch, RevokedAt: &Epoch}, id)
}

// SSHKeyCore.

// AddSSHKey answers the key as given, id 1, named req.Name.
func (c *Core) AddSSHKey(ctx context.Context, p types.Principal, req types.AddSSHKeyRequest) (types.SSHKey, error) {
	return echo(c, "AddSSHKey", p, types.SSHKey{ID: 1, Name: req.Name, Fingerprint: "SHA256:test", PublicKey: req.PublicKey, CreatedAt: Epoch}, req)
}

// ListSSHKeys answers no keys.
func (c *Core) ListSSHKeys(ctx context.Context, p types.Principal) ([]types.SSHKey, error) {
	return echo(c, "ListSSHKeys", p, []types.SSHKey{})
}

// DeleteSSHKey answers key id.
func (c *Core) DeleteSSHKey(ctx context.Context, p types.Principal, id int64) (types.SSHKey, error) {
	return echo(c, "DeleteSSHKey", p, types.SSHKey{ID: id, Name: "k", Fingerprint: "SHA256:test", CreatedAt: Epoch}, id)
}

// IdleCore and waking.

// SetProjectIdle answers the project with the setting asked.
func (c *Core) SetProjectIdle(ctx context.Context, p types.Principal, project string, req types.IdleSetting) (types.Project, error) {
	return echo(c, "SetProjectIdle", p, types.Project{Name: project, Current: 1, CreatedAt: Epoch, Egress: "open", Idle: &req}, project, req)
}

// WakeInstance answers the instance Running; instance "gone" is not found.
func (c *Core) WakeInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error) {
	if c.WakeInstanceFunc != nil {
		c.record("WakeInstance", p, id)
		return c.WakeInstanceFunc(ctx, id)
	}
	if id == "gone" {
		c.record("WakeInstance", p, id)
		return types.Instance{}, fmt.Errorf("instance %q: %w", id, errdefs.ErrNotFound)
	}
	return echo(c, "WakeInstance", p, instanceIn(id, types.StateRunning, types.ReasonStarted), id)
}

// RolloutCore: a rollout "ro-1" from "v1" to "v2" that switched project
// "web" of tenant "t1" (version 2 -> 3).

func fakeRollout(id, state string) types.Rollout {
	return types.Rollout{ID: id, OperationID: "op-ro", State: state, From: "envd/images/v1@sha256:1", To: "envd/images/v2@sha256:2",
		FromName: "v1", ToName: "v2", WaveSize: 5, Totals: map[string]int{types.RolloutProjectSwitched: 1},
		Projects: []types.RolloutProject{{Tenant: "t1", Project: "web", Status: types.RolloutProjectSwitched, OldVersion: 2, NewVersion: 3,
			Conflicts: []string{}}},
		CreatedAt: Epoch, UpdatedAt: Epoch}
}

func (c *Core) CreateRollout(ctx context.Context, p types.Principal, req types.CreateRolloutRequest, key string) (types.Rollout, error) {
	return echo(c, "CreateRollout", p, fakeRollout("ro-1", types.RolloutRunning), req, key)
}

func (c *Core) ListRollouts(ctx context.Context, p types.Principal) ([]types.Rollout, error) {
	r := fakeRollout("ro-1", types.RolloutSucceeded)
	r.Projects = nil
	return echo(c, "ListRollouts", p, []types.Rollout{r})
}

func (c *Core) GetRollout(ctx context.Context, p types.Principal, id string) (types.Rollout, error) {
	return echo(c, "GetRollout", p, fakeRollout(id, types.RolloutSucceeded), id)
}

func (c *Core) RolloutAction(ctx context.Context, p types.Principal, id, action string) (types.Rollout, error) {
	state := map[string]string{"pause": types.RolloutPaused, "resume": types.RolloutRunning, "cancel": types.RolloutCanceled}[action]
	return echo(c, "RolloutAction", p, fakeRollout(id, state), id, action)
}

// RollbackRollout answers an operation that has finished the rollback
// already (its result the rollout, rolled_back).
func (c *Core) RollbackRollout(ctx context.Context, p types.Principal, id string) (types.Operation, error) {
	op := c.NewOperation(types.OpKindRollback, id)
	ro := fakeRollout(id, types.RolloutRolledBack)
	ro.RollbackOperationID = op.ID
	ro.Projects[0].Status = types.RolloutProjectRolledBack
	ro.Totals = map[string]int{types.RolloutProjectRolledBack: 1}
	c.Finish(op.ID, types.OpSucceeded, ro, nil)
	return echo(c, "RollbackRollout", p, op, id)
}

func (c *Core) SetProjectValidation(ctx context.Context, p types.Principal, project string, req types.ProjectValidation) (types.Project, error) {
	return echo(c, "SetProjectValidation", p, types.Project{Name: project, Current: 1, Validate: req.Validate, CreatedAt: Epoch}, project, req)
}

// InstanceOwner answers local unless InstanceOwnerFunc says otherwise; it
// is not recorded (every instance route asks it).
func (c *Core) InstanceOwner(ctx context.Context, p types.Principal, id string) (string, string, bool, error) {
	if c.InstanceOwnerFunc != nil {
		return c.InstanceOwnerFunc(ctx, id)
	}
	return "", "", true, nil
}

func (c *Core) ListInstancesPage(ctx context.Context, p types.Principal, project string, page types.Page) ([]types.Instance, string, error) {
	v, err := echo(c, "ListInstancesPage", p, []types.Instance(nil), project, page)
	return v, "", err
}

// ListVersionsPage answers one version per page, numbered from the token
// ("" = 1) up to 3, so that a test can follow the pages.
func (c *Core) ListVersionsPage(ctx context.Context, p types.Principal, project string, page types.Page) ([]types.Version, string, error) {
	c.record("ListVersionsPage", p, project, page)
	n := 1
	if page.Token != "" {
		n, _ = strconv.Atoi(page.Token)
	}
	next := ""
	if n < 3 {
		next = strconv.Itoa(n + 1)
	}
	return []types.Version{{Project: project, Number: n, Kind: "snapshot", State: "ready", CreatedAt: Epoch}}, next, nil
}

func (c *Core) SetProjectPool(ctx context.Context, p types.Principal, project string, req types.PoolSetting) (types.Project, error) {
	return echo(c, "SetProjectPool", p, types.Project{Name: project, Pool: &req}, project, req)
}

// SpecCore.

// VersionSpec answers a declared spec installing tree.
func (c *Core) VersionSpec(ctx context.Context, p types.Principal, project string, n int) (types.VersionSpec, error) {
	return echo(c, "VersionSpec", p, types.VersionSpec{Project: project, Version: n, Kind: "build", Declared: true,
		Base: "envd/images/base@sha256:0000000000000000000000000000000000000000000000000000000000000000", BaseVersion: 1,
		Spec: types.BuildRequest{Manager: "apt", Packages: []string{"tree=2.1.0-1"},
			Files: []types.BuildFile{{Path: "/etc/app.conf", Content: "a: 1\n# two lines\n", Mode: "0644"}},
			Env:   map[string]string{"YES": "no"},
			Run:   []types.BuildStep{{Args: []string{"echo", "a;b $(x) 'q' \"d\""}}}},
		Omitted: []types.SpecOmit{{Path: "/etc/ld.so.cache", Reason: "written by ldconfig"}}}, project, n)
}

// UploadBuildContext reads the tar and answers a fixed digest.
func (c *Core) UploadBuildContext(ctx context.Context, p types.Principal, project string, r io.Reader) (types.BuildContext, error) {
	n, _ := io.Copy(io.Discard, r)
	return echo(c, "UploadBuildContext", p, types.BuildContext{Context: "sha256:1111111111111111111111111111111111111111111111111111111111111111", SizeBytes: n}, project)
}

// OperationLogs writes "log of ID".
func (c *Core) OperationLogs(ctx context.Context, p types.Principal, id string, w io.Writer) error {
	if _, err := echo(c, "OperationLogs", p, struct{}{}, id); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "log of %s\n", id)
	return err
}
