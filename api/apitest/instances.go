package apitest

import (
	"context"
	"fmt"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
)

// Instances is the fake InstanceCore; Restore starts an operation.
type Instances struct {
	*Recorder
	ops                *Operations
	CreateInstanceFunc func(ctx context.Context, project string, req types.CreateInstanceRequest, key string) (types.Instance, error)
	RestoreFunc        func(ctx context.Context, project string, req types.CreateInstanceRequest, key string) (types.Operation, error)
	GetInstanceFunc    func(ctx context.Context, id string) (types.Instance, error)
}

// instanceIn is the fake's instance id in state, entered for reason.
func instanceIn(id string, state types.InstanceState, reason string) types.Instance {
	return types.Instance{ID: id, Project: "p", Node: "node-1", Version: 1, Generation: 1,
		State: state, Reason: reason, CreatedAt: Epoch, LastTransitionAt: Epoch}
}

// CreateInstance answers instance "i-1" of the project, running.
func (c *Instances) CreateInstance(ctx context.Context, p types.Principal, project string, req types.CreateInstanceRequest, key string) (types.Instance, error) {
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
func (c *Instances) Restore(ctx context.Context, p types.Principal, project string, req types.CreateInstanceRequest, key string) (types.Operation, error) {
	c.record("Restore", p, project, req, key)
	if c.RestoreFunc != nil {
		return c.RestoreFunc(ctx, project, req, key)
	}
	return c.ops.NewOperation("restore", project+"-i1"), nil
}

func (c *Instances) ListInstances(ctx context.Context, p types.Principal, project string) ([]types.Instance, error) {
	return echo(c, "ListInstances", p, []types.Instance(nil), project)
}

func (c *Instances) GetInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error) {
	return verb(ctx, c, "GetInstance", p, id, c.GetInstanceFunc, instanceIn(id, types.StateRunning, types.ReasonStarted))
}

func (c *Instances) DeleteInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error) {
	return verb(ctx, c, "DeleteInstance", p, id, nil, instanceIn(id, types.StateTerminated, types.ReasonUserDelete))
}

func (c *Instances) ListInstancesPage(ctx context.Context, p types.Principal, project string, page types.Page) ([]types.Instance, string, error) {
	v, err := echo(c, "ListInstancesPage", p, []types.Instance(nil), project, page)
	return v, "", err
}

// Lifecycle is the fake LifecycleCore: each verb answers the instance in
// the state it leads to.
type Lifecycle struct {
	*Recorder
	// InstanceVerbFunc, when set, answers InstanceVerb instead.
	InstanceVerbFunc func(ctx context.Context, id, name string) (types.Instance, error)
}

// verb records an instance call and answers f's instance, else in.
func verb(ctx context.Context, c recorder, method string, p types.Principal, id string,
	f func(context.Context, string) (types.Instance, error), in types.Instance) (types.Instance, error) {
	c.record(method, p, id)
	if f != nil {
		return f(ctx, id)
	}
	return in, nil
}

// verbReasons are the reasons the core records for the plain verbs whose
// reason is not "user_" + the verb's name.
var verbReasons = map[string]string{"start": types.ReasonStarted}

// InstanceVerb records the call (arguments id, name) and answers the
// instance in the verb's To state (types.InstanceVerbs), so a verb added
// to the list needs nothing here; a start also answers generation 2, as
// the core starts a new one. A name not in the list is not found.
func (c *Lifecycle) InstanceVerb(ctx context.Context, p types.Principal, id, name string) (types.Instance, error) {
	c.record("InstanceVerb", p, id, name)
	if c.InstanceVerbFunc != nil {
		return c.InstanceVerbFunc(ctx, id, name)
	}
	v, ok := types.LookupInstanceVerb(name)
	if !ok {
		return types.Instance{}, fmt.Errorf("instance verb %q: %w", name, errdefs.ErrNotFound)
	}
	reason, ok := verbReasons[name]
	if !ok {
		reason = "user_" + name
	}
	in := instanceIn(id, v.To, reason)
	if name == "start" {
		in.Generation = 2
	}
	return in, nil
}

// HibernateInstance answers a Stopped instance hibernated as version 2;
// with memory, also as checkpoint 3 (and the request is recorded).
func (c *Lifecycle) HibernateInstance(ctx context.Context, p types.Principal, id string, req types.HibernateRequest) (types.Instance, error) {
	in := instanceIn(id, types.StateStopped, "hibernated")
	in.HibernatedVersion = 2
	if req.Memory {
		c.record("HibernateInstance", p, id, req)
		in.HibernatedCheckpoint = 3
		return in, nil
	}
	return verb(ctx, c, "HibernateInstance", p, id, nil, in)
}

// RenewInstance answers a Running instance expiring at Epoch + ttl, or
// never with "none".
func (c *Lifecycle) RenewInstance(ctx context.Context, p types.Principal, id, ttl string) (types.Instance, error) {
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
