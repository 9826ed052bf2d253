package envd

import (
	"context"
	"errors"

	"github.com/envd-dev/envd/api/errdefs"
	"github.com/envd-dev/envd/api/types"
)

// InstanceOwner tells which node must answer requests about instance id:
// local when this node does (or when no other node can: the instance is
// unknown, ended, hibernated and so startable anywhere, or its node never
// registered an address), else that node's name and API URL.
func (s *Service) InstanceOwner(ctx context.Context, p types.Principal, id string) (node, apiURL string, local bool, err error) {
	in, err := s.store.Instances.GetInstance(ctx, p.Tenant, id)
	if errors.Is(err, errdefs.ErrNotFound) {
		return "", "", true, nil // the local handler answers 404
	}
	if err != nil {
		return "", "", false, err
	}
	switch {
	case in.Node == "" || in.Node == s.cfg.Node:
		return in.Node, "", true, nil
	case in.State == types.StateTerminated || in.State == types.StateFailed:
		return in.Node, "", true, nil
	case in.State == types.StateStopped && in.HibernatedVersion > 0:
		return in.Node, "", true, nil // its layer is a version: it wakes on any node
	}
	u, err := s.store.Nodes.NodeURL(ctx, in.Node)
	if errors.Is(err, errdefs.ErrNotFound) {
		return in.Node, "", true, nil // the local handler names the node
	}
	if err != nil {
		return "", "", false, err
	}
	return in.Node, u, false, nil
}
