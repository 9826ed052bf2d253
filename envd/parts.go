package envd

import (
	"github.com/envd-dev/envd/envd/checkpoint"
	"github.com/envd-dev/envd/envd/cluster"
	"github.com/envd-dev/envd/envd/fileapi"
	"github.com/envd-dev/envd/envd/gateway"
	"github.com/envd-dev/envd/envd/images"
	"github.com/envd-dev/envd/envd/lifecycle"
	"github.com/envd-dev/envd/envd/ops"
	"github.com/envd-dev/envd/envd/ports"
	"github.com/envd-dev/envd/envd/rollout"
	"github.com/envd-dev/envd/envd/sshkeys"
	"github.com/envd-dev/envd/envd/tokens"
	"github.com/envd-dev/envd/envd/webhooks"
	"github.com/envd-dev/envd/workspace"
)

// Parts are the node's feature parts that serve API route groups of their
// own; the composition root (envd/node) hands each to the API. The
// Service serves the rest.
type Parts struct {
	// Instances: instances, their verbs and exec, wake, touch and hold
	// on access (with the cross-cutting wrappers applied).
	Instances *lifecycle.Instances
	// Volumes: the projects' volumes and their archives.
	Volumes *workspace.Feature
	// Cluster is the node's membership: the node routes, join tokens,
	// and which node answers for an instance or an operation.
	Cluster *cluster.Membership
	// Checkpoints: coordinated and periodic checkpoints; Forks: forks.
	Checkpoints *checkpoint.Checkpoints
	Forks       *checkpoint.Forks
	// Ports: the port proxy's ports, dials and previews.
	Ports *ports.Ports
	// Files: the file API.
	Files *fileapi.Files
	// Keys: the tenants' SSH keys and key logins.
	Keys *sshkeys.Keys
	// Tokens: the API's tokens and who they are.
	Tokens *tokens.Tokens
	// Rollouts: fleet upgrades (but for the projects' validation
	// commands, a project setting the Service keeps).
	Rollouts *rollout.Runner
	// Operations: reading, following and canceling operations.
	Operations *ops.Runner
	// Images: the base images.
	Images *images.Images
	// Egress: the egress gateway's denial log and brokered secrets.
	Egress *gateway.Gateway
	// Webhooks: the tenants' webhooks and their delivery log.
	Webhooks *webhooks.Hooks
}

// Parts returns the node's feature parts.
func (s *Service) Parts() Parts {
	return Parts{Instances: s.inst, Volumes: s.volumes, Cluster: s.cluster, Checkpoints: s.checkpoints, Forks: s.forks, Ports: s.ports, Files: s.files, Keys: s.keys, Tokens: s.tokens, Rollouts: s.rollouts,
		Operations: s.ops, Images: s.images, Webhooks: s.hooks, Egress: s.gateway}
}

// Core is the Service with its parts, for a server that takes one value
// serving every route group (api.Core, sshd.Core). The parts' methods are
// distinct, so each is promoted from the one part that has it.
type Core struct {
	*Service
	*lifecycle.Instances
	*workspace.Feature
	*cluster.Membership
	*checkpoint.Checkpoints
	*checkpoint.Forks
	*ports.Ports
	*fileapi.Files
	*sshkeys.Keys
	*tokens.Tokens
	*rollouts
	*operations
	*images.Images
}

// Two Runners, embedded under names of their own.
type (
	rollouts   = rollout.Runner
	operations = ops.Runner
)

// Core returns the Service with its parts.
func (s *Service) Core() Core {
	return Core{Service: s, Instances: s.inst, Feature: s.volumes, Membership: s.cluster, Checkpoints: s.checkpoints, Forks: s.forks, Ports: s.ports, Files: s.files, Keys: s.keys, Tokens: s.tokens,
		rollouts: s.rollouts, operations: s.ops, Images: s.images}
}

// Names of the parts' settings, kept here for the composition root's
// callers.
type (
	ClusterConfig = cluster.Config
	PeerFirewall  = cluster.PeerFirewall
	DialLimits    = ports.DialLimits
	WebhookConfig = webhooks.Config
)

// The placement settings of a node, the membership defaults, and the
// admission kind of dials (ports.AdmitDials).
const (
	PlacementSpread      = cluster.PlacementSpread
	PlacementLocal       = cluster.PlacementLocal
	DefaultLease         = cluster.DefaultLease
	DefaultSweepInterval = cluster.DefaultSweepInterval
	AdmitDials           = ports.AdmitDials
)

// DefaultDialLimits are ports.DefaultDialLimits.
var DefaultDialLimits = ports.DefaultDialLimits

// SecretKeySize is the size of the node's secret key (gateway.SecretKeySize).
const SecretKeySize = gateway.SecretKeySize

// DefaultMaxFileBytes is fileapi.DefaultMaxFileBytes.
const DefaultMaxFileBytes = fileapi.DefaultMaxFileBytes
