package node

import (
	"github.com/envd-dev/envd/api"
	"github.com/envd-dev/envd/envd"
	"github.com/envd-dev/envd/envd/checkpoint"
	"github.com/envd-dev/envd/envd/cluster"
	"github.com/envd-dev/envd/envd/lifecycle"
	"github.com/envd-dev/envd/envd/ports"
)

// APIParts is the API's parts on this node: one implementation per route
// group. A group a part serves alone gets that part; a group whose methods
// are spread over two parts gets the two, composed below; a group still
// served by the Service gets the Service (or envd.Core, which has the
// Service and every part, where the Service serves only some of it).
func APIParts(svc *envd.Service) api.Parts {
	p, core := svc.Parts(), svc.Core()
	return api.Parts{
		Auth:        p.Tokens,
		Node:        svc,
		Images:      p.Images,
		Projects:    svc,
		Instances:   p.Instances,
		Lifecycle:   p.Instances,
		Exec:        p.Instances,
		Versions:    core, // Fork is checkpoint.Forks'
		Volumes:     p.Volumes,
		Operations:  p.Operations,
		Tenants:     core, // quotas are the Service's, tokens tokens.Tokens'
		Forward:     p.Cluster,
		SSHKeys:     p.Keys,
		Idle:        svc,
		Ports:       portsPart{p.Ports, p.Instances},
		Files:       p.Files,
		Rollouts:    core, // validation commands are a project setting
		Pools:       svc,
		Checkpoints: p.Checkpoints,
		Egress:      p.Egress,
		Specs:       svc,
		Cluster:     clusterPart{p.Cluster, p.Checkpoints},
		Join:        p.Cluster,
		Webhooks:    p.Webhooks,
		Admitter:    svc,
	}
}

// portsPart is api.PortCore: ports, dials and previews are the port
// proxy's; waking, touching and holding the instance behind them the
// instances feature's.
type portsPart struct {
	*ports.Ports
	*lifecycle.Instances
}

// clusterPart is api.ClusterCore: nodes and placement are membership's,
// a project's checkpoint schedule the checkpoints'.
type clusterPart struct {
	*cluster.Membership
	*checkpoint.Checkpoints
}
