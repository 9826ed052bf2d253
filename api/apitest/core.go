// Package apitest provides small fakes of the API's parts, one per route
// group interface (Auth, Projects, Instances, ...), for tests of the HTTP
// layer and of its clients (package client, envctl).
//
// They are not a model of envd: every method records its call and answers
// a plain echo of its input, or what its Func field answers where a test
// needs another answer (an error, mostly). Operations are the exception:
// the Operations fake keeps an in-memory log per operation (NewOperation,
// AppendEvent, Finish) so that event streams can be tested; the fakes that
// start operations add them there. Behaviour of the real service is tested
// against *envd.Service.
//
// New composes one of each around one call log; a test that needs fewer
// groups builds api.Parts from the fakes it wants.
package apitest

import (
	"sync"
	"time"

	"github.com/envd-dev/envd/api"
	"github.com/envd-dev/envd/api/types"
)

// Token is the bearer token New's Auth accepts.
const Token = "test-token"

// Epoch is the time stamp of everything the fakes create.
var Epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// Call is one recorded call: the method name, the principal (zero for
// Authenticate and Info) and the arguments after it.
type Call struct {
	Method    string
	Principal types.Principal
	Args      []any
}

// Recorder is the call log the fakes of one test share.
type Recorder struct {
	mu    sync.Mutex
	calls []Call
}

func (r *Recorder) record(method string, p types.Principal, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, Call{Method: method, Principal: p, Args: args})
}

// Calls returns the calls so far, oldest first.
func (r *Recorder) Calls() []Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Call(nil), r.calls...)
}

// LastCall returns the newest call of method.
func (r *Recorder) LastCall(method string) (Call, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.calls) - 1; i >= 0; i-- {
		if r.calls[i].Method == method {
			return r.calls[i], true
		}
	}
	return Call{}, false
}

type recorder interface {
	record(method string, p types.Principal, args ...any)
}

// echo records the call and answers v.
func echo[T any](r recorder, method string, p types.Principal, v T, args ...any) (T, error) {
	r.record(method, p, args...)
	return v, nil
}

// Fakes is one fake per route group, sharing one call log (the embedded
// Recorder) and one operation log (Operations). Set a fake's Func fields
// before the first request.
type Fakes struct {
	*Recorder
	Auth        *Auth
	Node        *Node
	Images      *Images
	Projects    *Projects
	Instances   *Instances
	Lifecycle   *Lifecycle
	Exec        *Exec
	Versions    *Versions
	Volumes     *Volumes
	Operations  *Operations
	Tenants     *Tenants
	Forward     *Forward
	SSHKeys     *SSHKeys
	Idle        *Idle
	Ports       *Ports
	Files       *Files
	Rollouts    *Rollouts
	Pools       *Pools
	Checkpoints *Checkpoints
	Specs       *Specs
	Cluster     *Cluster
	Join        *Join
	Egress      *Egress
	Webhooks    *Webhooks
}

// New returns the fakes of every group; Auth accepts Token for an admin of
// tenant "t1".
func New() *Fakes {
	r := &Recorder{}
	ops := NewOperations(r)
	auth := &Auth{Recorder: r, Token: Token, Principal: types.Principal{Tenant: "t1", Admin: true}}
	wake := &Wake{Recorder: r}
	return &Fakes{
		Recorder:    r,
		Auth:        auth,
		Node:        &Node{Recorder: r, ops: ops},
		Images:      &Images{r},
		Projects:    &Projects{Recorder: r},
		Instances:   &Instances{Recorder: r, ops: ops},
		Lifecycle:   &Lifecycle{Recorder: r},
		Exec:        &Exec{Recorder: r, Wake: wake},
		Versions:    &Versions{Recorder: r, ops: ops},
		Volumes:     &Volumes{r},
		Operations:  ops,
		Tenants:     &Tenants{r},
		Forward:     &Forward{Recorder: r},
		SSHKeys:     &SSHKeys{r},
		Idle:        &Idle{r},
		Ports:       &Ports{Recorder: r, Wake: wake, auth: auth},
		Files:       &Files{r},
		Rollouts:    &Rollouts{Recorder: r, ops: ops},
		Pools:       &Pools{r},
		Checkpoints: &Checkpoints{Recorder: r, ops: ops},
		Specs:       &Specs{r},
		Cluster:     &Cluster{r},
		Join:        &Join{Recorder: r},
		Egress:      &Egress{r},
		Webhooks:    &Webhooks{r},
	}
}

// NewOperations returns an empty operation log recording calls in r.
func NewOperations(r *Recorder) *Operations {
	return &Operations{Recorder: r, ops: map[string]*opLog{}}
}

// Parts serves every group with its fake.
func (f *Fakes) Parts() api.Parts {
	return api.Parts{
		Auth: f.Auth, Node: f.Node, Images: f.Images, Projects: f.Projects, Instances: f.Instances,
		Lifecycle: f.Lifecycle, Exec: f.Exec, Versions: f.Versions, Volumes: f.Volumes,
		Operations: f.Operations, Tenants: f.Tenants, Forward: f.Forward, SSHKeys: f.SSHKeys,
		Idle: f.Idle, Ports: f.Ports, Files: f.Files, Rollouts: f.Rollouts, Pools: f.Pools,
		Checkpoints: f.Checkpoints, Specs: f.Specs, Cluster: f.Cluster, Join: f.Join,
		Egress:   f.Egress,
		Webhooks: f.Webhooks,
	}
}

// Each fake is its group's interface, nothing more.
var (
	_ api.Authenticator  = (*Auth)(nil)
	_ api.NodeCore       = (*Node)(nil)
	_ api.ImageCore      = (*Images)(nil)
	_ api.ProjectCore    = (*Projects)(nil)
	_ api.InstanceCore   = (*Instances)(nil)
	_ api.LifecycleCore  = (*Lifecycle)(nil)
	_ api.ExecCore       = (*Exec)(nil)
	_ api.VersionCore    = (*Versions)(nil)
	_ api.VolumeCore     = (*Volumes)(nil)
	_ api.OperationCore  = (*Operations)(nil)
	_ api.TenantCore     = (*Tenants)(nil)
	_ api.ForwardCore    = (*Forward)(nil)
	_ api.SSHKeyCore     = (*SSHKeys)(nil)
	_ api.WebhookCore    = (*Webhooks)(nil)
	_ api.IdleCore       = (*Idle)(nil)
	_ api.PortCore       = (*Ports)(nil)
	_ api.FileCore       = (*Files)(nil)
	_ api.RolloutCore    = (*Rollouts)(nil)
	_ api.PoolCore       = (*Pools)(nil)
	_ api.CheckpointCore = (*Checkpoints)(nil)
	_ api.SpecCore       = (*Specs)(nil)
	_ api.ClusterCore    = (*Cluster)(nil)
	_ api.JoinCore       = (*Join)(nil)
)
