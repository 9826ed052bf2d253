package node

import (
	"github.com/envd-dev/envd/api"
	"github.com/envd-dev/envd/envd"
)

// APIParts is the API's parts on this node: one implementation per route
// group. For now *envd.Service implements every group; as features move
// into parts of their own, each field here names its part.
func APIParts(svc *envd.Service) api.Parts {
	return api.Parts{
		Auth:        svc,
		Node:        svc,
		Images:      svc,
		Projects:    svc,
		Instances:   svc,
		Lifecycle:   svc,
		Exec:        svc,
		Versions:    svc,
		Volumes:     svc,
		Operations:  svc,
		Tenants:     svc,
		Forward:     svc,
		SSHKeys:     svc,
		Idle:        svc,
		Ports:       svc,
		Files:       svc,
		Rollouts:    svc,
		Pools:       svc,
		Checkpoints: svc,
		Specs:       svc,
		Cluster:     svc,
		Join:        svc,
		Admitter:    svc,
	}
}
