package node

import (
	"github.com/envd-dev/envd/api"
	"github.com/envd-dev/envd/envd"
)

// APIParts is the API's parts on this node: one implementation per route
// group. A group a part serves alone gets that part; a group whose methods
// are spread over the Service and parts gets envd.Core, which has them all.
func APIParts(svc *envd.Service) api.Parts {
	p, core := svc.Parts(), svc.Core()
	return api.Parts{
		Auth:        p.Tokens,
		Node:        svc,
		Images:      p.Images,
		Projects:    svc,
		Instances:   svc,
		Lifecycle:   svc,
		Exec:        svc,
		Versions:    core, // Fork is checkpoint.Forks'
		Volumes:     svc,
		Operations:  p.Operations,
		Tenants:     core, // quotas are the Service's, tokens tokens.Tokens'
		Forward:     p.Cluster,
		SSHKeys:     p.Keys,
		Idle:        svc,
		Ports:       core, // wake, touch and hold are the Service's
		Files:       p.Files,
		Rollouts:    core, // validation commands are a project setting
		Pools:       svc,
		Checkpoints: p.Checkpoints,
		Specs:       svc,
		Cluster:     core, // placement is the Service's, the checkpoint schedule checkpoint's
		Join:        p.Cluster,
		Admitter:    svc,
	}
}
