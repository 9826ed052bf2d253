package types

import (
	"context"
	"time"
)

// Node states: a node takes new instances only when ready.
const (
	NodeReady    = "ready"    // takes placements
	NodeCordoned = "cordoned" // takes no new placements; what runs stays
	NodeDraining = "draining" // takes none and hibernates what it runs
	NodeDrained  = "drained"  // drain finished; uncordon makes it ready
	NodeLost     = "lost"     // its lease lapsed: its instances are Failed node_lost
)

// Node is a member of the cluster (GET /v1/nodes, admin).
type Node struct {
	Name   string            `json:"name"`
	APIURL string            `json:"api_url"`
	State  string            `json:"state"`
	Labels map[string]string `json:"labels"`
	// Capacity as the node reported it at start (flags or the host).
	Capacity NodeCapacity `json:"capacity"`
	// Used is what the limits of its live instances add up to.
	Used NodeCapacity `json:"used"`
	// Instances are its live instances (not Terminated, Failed or
	// hibernated).
	Instances int `json:"instances"`
	// LeaseSeconds is the node's lease length; LeaseExpiresAt is set by the
	// database's clock on every renewal. Expired: the lease lapsed and the
	// node is about to be marked lost.
	LeaseSeconds   float64   `json:"lease_seconds"`
	LeaseExpiresAt time.Time `json:"lease_expires_at"`
	Expired        bool      `json:"expired,omitempty"`
	RenewedAt      time.Time `json:"renewed_at"`
	StartedAt      time.Time `json:"started_at"`
	StateChangedAt time.Time `json:"state_changed_at"`
	Version        string    `json:"version,omitempty"`
	// Stopped: the node shut down gracefully and takes no placements
	// until it starts again (its lease decides when it is lost).
	Stopped bool `json:"stopped,omitempty"`
}

// NodeCapacity is CPU, memory, disk and instance slots (0 = not known, or
// for slots: no bound).
type NodeCapacity struct {
	CPUs          float64 `json:"cpus"`
	MemoryBytes   int64   `json:"memory_bytes"`
	DiskBytes     int64   `json:"disk_bytes"`
	InstanceSlots int     `json:"instance_slots"`
}

// NodeList is the answer of GET /v1/nodes.
type NodeList struct {
	Nodes []Node `json:"nodes"`
}

// JoinCommand is the answer of GET /v1/nodes/join-command: the command
// another machine runs to join this cluster. It holds secrets (the
// database DSN's password, S3 keys): admins only.
type JoinCommand struct {
	Command string   `json:"command"`
	Args    []string `json:"args"`
	// Secrets says which of Args carry credentials.
	Secrets []string `json:"secrets,omitempty"`
	Notes   []string `json:"notes,omitempty"`
}

type placementKey struct{}

// WithPlacement carries the placement decision of a new instance from the
// API (which places and forwards) to the core (which records it).
func WithPlacement(ctx context.Context, reason string) context.Context {
	return context.WithValue(ctx, placementKey{}, reason)
}

// PlacementFrom is the decision WithPlacement carried, "" when none.
func PlacementFrom(ctx context.Context) string {
	s, _ := ctx.Value(placementKey{}).(string)
	return s
}

// CheckpointSetting is the body and answer of PUT and GET
// /v1/projects/{p}/checkpoint: how often the project's running retained
// instances are saved as non-current versions (a Go duration of at least
// 10s; "0" = never, the default).
type CheckpointSetting struct {
	Every string `json:"every"`
}
