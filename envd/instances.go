package envd

import (
	"context"

	"github.com/envd-dev/envd/api/types"
)

// The instance methods are lifecycle.Manager's; see there for each
// contract.

// CreateInstance starts an instance of project and returns it running.
func (s *Service) CreateInstance(ctx context.Context, p types.Principal, project string, req types.CreateInstanceRequest, idempotencyKey string) (types.Instance, error) {
	return s.life.CreateInstance(ctx, p, project, req, idempotencyKey)
}

// ListInstances lists the tenant's instances, of one project or all.
func (s *Service) ListInstances(ctx context.Context, p types.Principal, project string) ([]types.Instance, error) {
	return s.life.ListInstances(ctx, p, project)
}

// GetInstance returns one instance.
func (s *Service) GetInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error) {
	return s.instances.GetInstance(ctx, p, id)
}

// DeleteInstance terminates an instance; saved versions and volumes stay.
func (s *Service) DeleteInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error) {
	return s.life.DeleteInstance(ctx, p, id)
}

// PauseInstance freezes the instance's processes; memory is kept.
func (s *Service) PauseInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error) {
	return s.life.PauseInstance(ctx, p, id)
}

// ResumeInstance thaws a paused instance and returns its current endpoint.
func (s *Service) ResumeInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error) {
	return s.life.ResumeInstance(ctx, p, id)
}

// StopInstance stops a retained instance, keeping its writable layer.
func (s *Service) StopInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error) {
	return s.life.StopInstance(ctx, p, id)
}

// StartInstance starts a stopped instance with a new generation.
func (s *Service) StartInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error) {
	return s.life.StartInstance(ctx, p, id)
}

// RenewInstance sets the instance's expiry to now + ttl.
func (s *Service) RenewInstance(ctx context.Context, p types.Principal, id, ttl string) (types.Instance, error) {
	return s.renews.RenewInstance(ctx, p, id, ttl)
}

// HibernateInstance hibernates a stopped retained instance now.
func (s *Service) HibernateInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error) {
	return s.life.HibernateInstance(ctx, p, id)
}

// Exec runs a command in a running instance and returns its output.
func (s *Service) Exec(ctx context.Context, p types.Principal, id string, req types.ExecRequest) (types.ExecResult, error) {
	return s.execs.Exec(ctx, p, id, req)
}

// ExecStream runs a command in a running instance with its streams
// connected to stdio and returns its exit code.
func (s *Service) ExecStream(ctx context.Context, p types.Principal, id string, req types.ExecRequest, stdio types.Stdio) (int, error) {
	return s.execs.Stream(ctx, p, id, req, stdio)
}
