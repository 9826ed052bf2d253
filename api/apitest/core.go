// Package apitest provides a scriptable api.Core for tests of the HTTP layer
// and of its clients (package client, envctl).
//
// It is not a model of envd: every method records its call and answers from
// a Func field when one is set, otherwise with a plain echo of its input.
// Operations are the exception: the fake keeps an in-memory log per
// operation (NewOperation, AppendEvent, Finish) so that event streams can be
// tested. Behaviour of the real service is tested against *envd.Service.
package apitest

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
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

	InfoFunc           func(ctx context.Context) (types.Info, error)
	ImportImageFunc    func(ctx context.Context, name string, tarball io.Reader) (types.Image, error)
	ListImagesFunc     func(ctx context.Context) ([]types.Image, error)
	CreateProjectFunc  func(ctx context.Context, req types.CreateProjectRequest, key string) (types.Project, error)
	ListProjectsFunc   func(ctx context.Context) ([]types.Project, error)
	GetProjectFunc     func(ctx context.Context, name string) (types.Project, error)
	DeleteProjectFunc  func(ctx context.Context, name string) error
	CreateInstanceFunc func(ctx context.Context, project string, req types.CreateInstanceRequest, key string) (types.Instance, error)
	RestoreFunc        func(ctx context.Context, project string, req types.CreateInstanceRequest, key string) (types.Operation, error)
	SetRetentionFunc   func(ctx context.Context, project string, r types.Retention) (types.Project, error)
	GCFunc             func(ctx context.Context, req types.GCRequest, key string) (types.Operation, error)
	BuildFunc          func(ctx context.Context, project string, req types.BuildRequest, key string) (types.Operation, error)
	ListInstancesFunc  func(ctx context.Context, project string) ([]types.Instance, error)
	GetInstanceFunc    func(ctx context.Context, id string) (types.Instance, error)
	DeleteInstanceFunc func(ctx context.Context, id string) (types.Instance, error)
	ExecFunc           func(ctx context.Context, id string, req types.ExecRequest) (types.ExecResult, error)
	// ExecStreamFunc scripts a streaming exec. Without it the fake echoes
	// stdin to stdout until stdin ends, records the sizes received (Sizes)
	// and returns exit code 0.
	ExecStreamFunc func(ctx context.Context, id string, req types.ExecRequest, stdio types.Stdio) (int, error)
	// The lifecycle verbs; without them each answers the instance in the
	// state the verb leads to.
	StopInstanceFunc    func(ctx context.Context, id string) (types.Instance, error)
	StartInstanceFunc   func(ctx context.Context, id string) (types.Instance, error)
	PauseInstanceFunc   func(ctx context.Context, id string) (types.Instance, error)
	ResumeInstanceFunc  func(ctx context.Context, id string) (types.Instance, error)
	RenewInstanceFunc   func(ctx context.Context, id, ttl string) (types.Instance, error)
	HibernateFunc       func(ctx context.Context, id string) (types.Instance, error)
	ListVolumesFunc     func(ctx context.Context, project string) ([]types.Volume, error)
	AddVolumeFunc       func(ctx context.Context, project string, req types.AddVolumeRequest) (types.Project, error)
	RemoveVolumeFunc    func(ctx context.Context, project, name string) (types.Project, error)
	ArchiveVolumeFunc   func(ctx context.Context, project, name string, req types.VolumeArchiveRequest) (types.VolumeArchive, error)
	RestoreVolumeFunc   func(ctx context.Context, project, name string, req types.VolumeArchiveRequest) (types.Volume, error)
	SaveFunc            func(ctx context.Context, id string, req types.SaveRequest, key string) (types.Operation, error)
	ListVersionsFunc    func(ctx context.Context, project string) ([]types.Version, error)
	GetVersionFunc      func(ctx context.Context, project string, n int) (types.Version, error)
	SetCurrentFunc      func(ctx context.Context, project string, req types.SetCurrentRequest) (types.Project, error)
	PinVersionFunc      func(ctx context.Context, project string, n int, pinned bool) (types.Version, error)
	GetOperationFunc    func(ctx context.Context, id string) (types.Operation, error)
	OperationEventsFunc func(ctx context.Context, id string, after int) ([]types.Event, error)

	mu    sync.Mutex
	calls []Call
	sizes []types.TermSize
	ops   map[string]*opLog
	nOps  int
}

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

// NewOperation adds a running operation and returns it.
func (c *Core) NewOperation(kind, target string) types.Operation {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nOps++
	op := types.Operation{
		ID: fmt.Sprintf("op-%d", c.nOps), Kind: types.OpKind(kind), Target: target, State: types.OpRunning,
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

func (c *Core) Authenticate(ctx context.Context, token string) (types.Principal, error) {
	c.record("Authenticate", types.Principal{}, token)
	if subtle.ConstantTimeCompare([]byte(token), []byte(c.Token)) != 1 {
		return types.Principal{}, fmt.Errorf("token: %w", errdefs.ErrUnauthenticated)
	}
	return c.Principal, nil
}

func (c *Core) Info(ctx context.Context) (types.Info, error) {
	c.record("Info", types.Principal{})
	if c.InfoFunc != nil {
		return c.InfoFunc(ctx)
	}
	return types.Info{Version: "test", Node: "node-1", Registry: "127.0.0.1:5000",
		Components: map[string]string{"containerd": "v2.4.2"}}, nil
}

// ImportImage reads the whole tarball; the recorded arguments are the name
// and the bytes read.
func (c *Core) ImportImage(ctx context.Context, p types.Principal, name string, tarball io.Reader) (types.Image, error) {
	if c.ImportImageFunc != nil {
		c.record("ImportImage", p, name)
		return c.ImportImageFunc(ctx, name, tarball)
	}
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
	c.record("ListImages", p)
	if c.ListImagesFunc != nil {
		return c.ListImagesFunc(ctx)
	}
	return nil, nil
}

// CreateProject records the request and the idempotency key.
func (c *Core) CreateProject(ctx context.Context, p types.Principal, req types.CreateProjectRequest, key string) (types.Project, error) {
	c.record("CreateProject", p, req, key)
	if c.CreateProjectFunc != nil {
		return c.CreateProjectFunc(ctx, req, key)
	}
	comp := req.Compression
	if comp == "" {
		comp = "estargz"
	}
	return types.Project{Name: req.Name, BaseImage: req.Base, Current: 1, Excludes: req.Excludes,
		Compression: comp, CreatedAt: Epoch}, nil
}

func (c *Core) ListProjects(ctx context.Context, p types.Principal) ([]types.Project, error) {
	c.record("ListProjects", p)
	if c.ListProjectsFunc != nil {
		return c.ListProjectsFunc(ctx)
	}
	return nil, nil
}

func (c *Core) GetProject(ctx context.Context, p types.Principal, name string) (types.Project, error) {
	c.record("GetProject", p, name)
	if c.GetProjectFunc != nil {
		return c.GetProjectFunc(ctx, name)
	}
	return types.Project{Name: name, BaseImage: "busybox", Current: 1, Compression: "estargz", CreatedAt: Epoch}, nil
}

func (c *Core) DeleteProject(ctx context.Context, p types.Principal, name string) error {
	c.record("DeleteProject", p, name)
	if c.DeleteProjectFunc != nil {
		return c.DeleteProjectFunc(ctx, name)
	}
	return nil
}

// CreateInstance records the project, the request and the idempotency key.
func (c *Core) CreateInstance(ctx context.Context, p types.Principal, project string, req types.CreateInstanceRequest, key string) (types.Instance, error) {
	c.record("CreateInstance", p, project, req, key)
	if c.CreateInstanceFunc != nil {
		return c.CreateInstanceFunc(ctx, project, req, key)
	}
	v := req.Version
	if v == 0 {
		v = 1
	}
	return types.Instance{ID: "i-1", Project: project, Node: "node-1", Version: v, Generation: 1,
		State: types.StateRunning, Reason: types.ReasonStarted, Retain: req.Retain,
		CreatedAt: Epoch, LastTransitionAt: Epoch}, nil
}

func (c *Core) ListInstances(ctx context.Context, p types.Principal, project string) ([]types.Instance, error) {
	c.record("ListInstances", p, project)
	if c.ListInstancesFunc != nil {
		return c.ListInstancesFunc(ctx, project)
	}
	return nil, nil
}

func (c *Core) GetInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error) {
	c.record("GetInstance", p, id)
	if c.GetInstanceFunc != nil {
		return c.GetInstanceFunc(ctx, id)
	}
	return types.Instance{ID: id, Project: "p", Node: "node-1", Version: 1, Generation: 1,
		State: types.StateRunning, Reason: types.ReasonStarted, CreatedAt: Epoch, LastTransitionAt: Epoch}, nil
}

func (c *Core) DeleteInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error) {
	c.record("DeleteInstance", p, id)
	if c.DeleteInstanceFunc != nil {
		return c.DeleteInstanceFunc(ctx, id)
	}
	return types.Instance{ID: id, Project: "p", Node: "node-1", Version: 1, Generation: 1,
		State: types.StateTerminated, Reason: types.ReasonUserDelete, CreatedAt: Epoch, LastTransitionAt: Epoch}, nil
}

func (c *Core) Exec(ctx context.Context, p types.Principal, id string, req types.ExecRequest) (types.ExecResult, error) {
	c.record("Exec", p, id, req)
	if c.ExecFunc != nil {
		return c.ExecFunc(ctx, id, req)
	}
	return types.ExecResult{Stdout: fmt.Sprintln(req.Args)}, nil
}

// instanceIn is the fake's instance id in state, entered for reason.
func instanceIn(id string, state types.InstanceState, reason string) types.Instance {
	return types.Instance{ID: id, Project: "p", Node: "node-1", Version: 1, Generation: 1,
		State: state, Reason: reason, CreatedAt: Epoch, LastTransitionAt: Epoch}
}

func (c *Core) StopInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error) {
	c.record("StopInstance", p, id)
	if c.StopInstanceFunc != nil {
		return c.StopInstanceFunc(ctx, id)
	}
	return instanceIn(id, types.StateStopped, types.ReasonUserStop), nil
}

func (c *Core) StartInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error) {
	c.record("StartInstance", p, id)
	if c.StartInstanceFunc != nil {
		return c.StartInstanceFunc(ctx, id)
	}
	in := instanceIn(id, types.StateRunning, types.ReasonStarted)
	in.Generation = 2
	return in, nil
}

func (c *Core) PauseInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error) {
	c.record("PauseInstance", p, id)
	if c.PauseInstanceFunc != nil {
		return c.PauseInstanceFunc(ctx, id)
	}
	return instanceIn(id, types.StatePaused, types.ReasonUserPause), nil
}

func (c *Core) ResumeInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error) {
	c.record("ResumeInstance", p, id)
	if c.ResumeInstanceFunc != nil {
		return c.ResumeInstanceFunc(ctx, id)
	}
	return instanceIn(id, types.StateRunning, types.ReasonUserResume), nil
}

// RenewInstance answers a Running instance expiring at Epoch + ttl, or
// never with "none".
func (c *Core) RenewInstance(ctx context.Context, p types.Principal, id, ttl string) (types.Instance, error) {
	c.record("RenewInstance", p, id, ttl)
	if c.RenewInstanceFunc != nil {
		return c.RenewInstanceFunc(ctx, id, ttl)
	}
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

// Save starts a running operation of kind "save" unless SaveFunc is set.
// SetRetention answers the project with the policy unless SetRetentionFunc
// is set.
func (c *Core) SetRetention(ctx context.Context, p types.Principal, project string, r types.Retention) (types.Project, error) {
	c.record("SetRetention", p, project, r)
	if c.SetRetentionFunc != nil {
		return c.SetRetentionFunc(ctx, project, r)
	}
	return types.Project{Name: project, Current: 1, Retention: &r, CreatedAt: Epoch}, nil
}

// Migrate starts a running operation of kind "migrate".
func (c *Core) Migrate(ctx context.Context, p types.Principal, project string, req types.MigrateRequest, key string) (types.Operation, error) {
	c.record("Migrate", p, project, req, key)
	return c.NewOperation("migrate", project), nil
}

// Build starts a running operation of kind "build" unless BuildFunc is set.
func (c *Core) Build(ctx context.Context, p types.Principal, project string, req types.BuildRequest, key string) (types.Operation, error) {
	c.record("Build", p, project, req, key)
	if c.BuildFunc != nil {
		return c.BuildFunc(ctx, project, req, key)
	}
	return c.NewOperation("build", project), nil
}

// SetQuota answers the quota as asked.
func (c *Core) SetQuota(ctx context.Context, p types.Principal, tenant string, q types.Quota) (types.Quota, error) {
	c.record("SetQuota", p, tenant, q)
	return q, nil
}

// Usage answers an empty usage of the tenant ("" = the caller's).
func (c *Core) Usage(ctx context.Context, p types.Principal, tenant string) (types.Usage, error) {
	c.record("Usage", p, tenant)
	if tenant == "" {
		tenant = p.Tenant
	}
	return types.Usage{Tenant: tenant, Versions: map[string]int{}}, nil
}

// CreateToken answers a fixed token of the tenant.
func (c *Core) CreateToken(ctx context.Context, p types.Principal, tenant string, req types.CreateTokenRequest) (types.Token, error) {
	c.record("CreateToken", p, tenant, req)
	return types.Token{Tenant: tenant, Token: "tok-" + tenant, Admin: req.Admin}, nil
}

// GC starts a running operation of kind "gc" unless GCFunc is set.
func (c *Core) GC(ctx context.Context, p types.Principal, req types.GCRequest, key string) (types.Operation, error) {
	c.record("GC", p, req, key)
	if c.GCFunc != nil {
		return c.GCFunc(ctx, req, key)
	}
	return c.NewOperation("gc", "registry"), nil
}

// Restore starts a running operation of kind "restore" on a new instance
// id unless RestoreFunc is set.
func (c *Core) Restore(ctx context.Context, p types.Principal, project string, req types.CreateInstanceRequest, key string) (types.Operation, error) {
	c.record("Restore", p, project, req, key)
	if c.RestoreFunc != nil {
		return c.RestoreFunc(ctx, project, req, key)
	}
	return c.NewOperation("restore", project+"-i1"), nil
}

func (c *Core) Save(ctx context.Context, p types.Principal, id string, req types.SaveRequest, key string) (types.Operation, error) {
	c.record("Save", p, id, req, key)
	if c.SaveFunc != nil {
		return c.SaveFunc(ctx, id, req, key)
	}
	return c.NewOperation("save", id), nil
}

func (c *Core) ListVersions(ctx context.Context, p types.Principal, project string) ([]types.Version, error) {
	c.record("ListVersions", p, project)
	if c.ListVersionsFunc != nil {
		return c.ListVersionsFunc(ctx, project)
	}
	return nil, nil
}

func (c *Core) GetVersion(ctx context.Context, p types.Principal, project string, n int) (types.Version, error) {
	c.record("GetVersion", p, project, n)
	if c.GetVersionFunc != nil {
		return c.GetVersionFunc(ctx, project, n)
	}
	return types.Version{Project: project, Number: n, Kind: "snapshot", State: "ready", CreatedAt: Epoch}, nil
}

func (c *Core) SetCurrent(ctx context.Context, p types.Principal, project string, req types.SetCurrentRequest) (types.Project, error) {
	c.record("SetCurrent", p, project, req)
	if c.SetCurrentFunc != nil {
		return c.SetCurrentFunc(ctx, project, req)
	}
	return types.Project{Name: project, Current: req.Version, CreatedAt: Epoch}, nil
}

func (c *Core) PinVersion(ctx context.Context, p types.Principal, project string, n int, pinned bool) (types.Version, error) {
	c.record("PinVersion", p, project, n, pinned)
	if c.PinVersionFunc != nil {
		return c.PinVersionFunc(ctx, project, n, pinned)
	}
	return types.Version{Project: project, Number: n, Kind: "snapshot", State: "ready", Pinned: pinned, CreatedAt: Epoch}, nil
}

func (c *Core) GetOperation(ctx context.Context, p types.Principal, id string) (types.Operation, error) {
	c.record("GetOperation", p, id)
	if c.GetOperationFunc != nil {
		return c.GetOperationFunc(ctx, id)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	l, ok := c.ops[id]
	if !ok {
		return types.Operation{}, fmt.Errorf("operation %q: %w", id, errdefs.ErrNotFound)
	}
	return l.op, nil
}

// CancelOperation moves a running operation to canceled.
func (c *Core) CancelOperation(ctx context.Context, p types.Principal, id string) (types.Operation, error) {
	c.record("CancelOperation", p, id)
	c.mu.Lock()
	defer c.mu.Unlock()
	l, ok := c.ops[id]
	if !ok {
		return types.Operation{}, fmt.Errorf("operation %q: %w", id, errdefs.ErrNotFound)
	}
	if !l.op.Done() {
		l.op.State = types.OpCanceled
		l.events = append(l.events, types.Event{Seq: len(l.events) + 1, At: Epoch, Type: "canceled", Message: "canceled by request"})
	}
	return l.op, nil
}

func (c *Core) OperationEvents(ctx context.Context, p types.Principal, id string, after int) ([]types.Event, error) {
	c.record("OperationEvents", p, id, after)
	if c.OperationEventsFunc != nil {
		return c.OperationEventsFunc(ctx, id, after)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	l, ok := c.ops[id]
	if !ok {
		return nil, fmt.Errorf("operation %q: %w", id, errdefs.ErrNotFound)
	}
	var out []types.Event
	for _, ev := range l.events {
		if ev.Seq > after {
			out = append(out, ev)
		}
	}
	return out, nil
}

var _ api.Core = (*Core)(nil)

// HibernateInstance answers a Stopped instance hibernated as version 2.
func (c *Core) HibernateInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error) {
	c.record("HibernateInstance", p, id)
	if c.HibernateFunc != nil {
		return c.HibernateFunc(ctx, id)
	}
	in := instanceIn(id, types.StateStopped, "hibernated")
	in.HibernatedVersion = 2
	return in, nil
}

// ListVolumes answers no volumes.
func (c *Core) ListVolumes(ctx context.Context, p types.Principal, project string) ([]types.Volume, error) {
	c.record("ListVolumes", p, project)
	if c.ListVolumesFunc != nil {
		return c.ListVolumesFunc(ctx, project)
	}
	return nil, nil
}

// AddVolume answers the project with the spec as its only volume's name.
func (c *Core) AddVolume(ctx context.Context, p types.Principal, project string, req types.AddVolumeRequest) (types.Project, error) {
	c.record("AddVolume", p, project, req)
	if c.AddVolumeFunc != nil {
		return c.AddVolumeFunc(ctx, project, req)
	}
	return types.Project{Name: project, Volumes: []types.Volume{{Name: req.Spec}}, CreatedAt: Epoch}, nil
}

// RemoveVolume answers the project without volumes.
func (c *Core) RemoveVolume(ctx context.Context, p types.Principal, project, name string) (types.Project, error) {
	c.record("RemoveVolume", p, project, name)
	if c.RemoveVolumeFunc != nil {
		return c.RemoveVolumeFunc(ctx, project, name)
	}
	return types.Project{Name: project, CreatedAt: Epoch}, nil
}

// ArchiveVolume answers an archive under the requested key.
func (c *Core) ArchiveVolume(ctx context.Context, p types.Principal, project, name string, req types.VolumeArchiveRequest) (types.VolumeArchive, error) {
	c.record("ArchiveVolume", p, project, name, req)
	if c.ArchiveVolumeFunc != nil {
		return c.ArchiveVolumeFunc(ctx, project, name, req)
	}
	return types.VolumeArchive{Key: req.Key, Bytes: 1, Files: 1}, nil
}

// RestoreVolume answers the volume by name.
func (c *Core) RestoreVolume(ctx context.Context, p types.Principal, project, name string, req types.VolumeArchiveRequest) (types.Volume, error) {
	c.record("RestoreVolume", p, project, name, req)
	if c.RestoreVolumeFunc != nil {
		return c.RestoreVolumeFunc(ctx, project, name, req)
	}
	return types.Volume{Name: name}, nil
}

// Metrics answers one sample.
func (c *Core) Metrics(ctx context.Context, p types.Principal) (string, error) {
	c.record("Metrics", p)
	return "envd_up 1\n", nil
}
