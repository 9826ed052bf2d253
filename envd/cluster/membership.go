package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/versions"
)

// Membership (issue 10). Every node joins the `nodes` table at start with
// its API URL, capacity, labels and a lease, and renews the lease every
// Lease/3 by the DATABASE's clock (now() in SQL; nodes' clocks are never
// compared). Every SweepInterval each node marks the nodes whose lease
// lapsed as lost (one UPDATE ... WHERE state <> 'lost' wins per node),
// fails their live instances with reason node_lost and new generations in
// the same transaction, and settles their unfinished operations as
// interrupted. So an instance of a node that died is Failed within
// Lease + SweepInterval of the dead node's last renewal. A node sweeps
// only once it has renewed without a failure for a whole lease, and never
// marks itself, so a database outage does not make live nodes mark each
// other lost.
//
// A node that comes back finds its rows fenced: its renewal answers
// ErrFenced, it reconciles (removes the containers of its Failed
// instances: no live row owns them) and joins again, ready.

// Config is a node's membership settings; zero fields get defaults in
// withDefaults.
type Config struct {
	// Lease is how long the node counts as alive after a renewal;
	// default DefaultLease. Shorter: lost nodes are found sooner, and a
	// node that cannot reach the database for longer (a partition) is
	// marked lost by the others.
	Lease time.Duration
	// SweepInterval is how often the node looks for lost nodes; default
	// DefaultSweepInterval.
	SweepInterval time.Duration
	Labels        map[string]string
	// RuntimeClasses are the runtime classes the node can run, recorded
	// at its join for placement (Request.Class); nil = not told.
	RuntimeClasses []string
	// Capacity is what the node offers placement; zero fields are read
	// from the host (CPUs, memory, the data dir's disk), memory and disk
	// multiplied by their overcommit; InstanceSlots 0 = no bound.
	Capacity types.NodeCapacity
	// MemoryOvercommit and DiskOvercommit multiply the host's memory and
	// disk that placement offers the instances' limits, when Capacity
	// does not name them: limits are ceilings, which idle environments
	// stay far below (the node refuses a layer on its real free disk,
	// runtime.Config.DiskOvercommit). 0 or 1 = fully reserved.
	MemoryOvercommit, DiskOvercommit float64
	// Join is the command another machine runs to join this cluster
	// (envctl nodes join-command); envd/node fills it.
	Join types.JoinCommand
	// Placement is how this node places the instances asked of it:
	// PlacementSpread (the default: the cluster policy, cluster.Place) or
	// PlacementLocal (here whenever this node is eligible).
	Placement string
	// DiskRoom reports the most bytes of new writable-layer limits the
	// node takes now (runtime.Runtime.DiskRoom); it is recorded with every
	// lease renewal for placement. nil, or ok false = not reported.
	DiskRoom func() (bytes int64, ok bool)
	// Peers is the instance firewall the other nodes' addresses are
	// denied in, kept up to date as nodes join and leave (denyPeers); nil
	// = none.
	Peers PeerFirewall
	// JoinConfig is what a node that joins with a join token is given
	// (envd serve --join); envd/node fills it; nil = this node cannot
	// tell (its database or registry is private to it).
	JoinConfig func() (types.JoinConfig, error)
	// TLSCertificate is the certificate (DER) the node's API serves now;
	// nil (or a nil func) for plain HTTP. It is recorded in the node table
	// at join and again at a renewal after it changed, and the other nodes
	// trust exactly it when they forward requests here; envd/node fills it.
	TLSCertificate func() []byte
}

// The placement settings of a node.
const (
	PlacementSpread = "spread"
	PlacementLocal  = "local"
)

// The membership defaults.
const (
	DefaultLease         = 15 * time.Second
	DefaultSweepInterval = 5 * time.Second
)

// Store is what membership needs of the store: the node table, join
// tokens, and the instances and operations of nodes.
type Store interface {
	Join(ctx context.Context, r versions.Registration) (versions.Member, error)
	RenewLease(ctx context.Context, node string) (string, error)
	LeaveNode(ctx context.Context, node string) error
	SetNodeCertificate(ctx context.Context, node string, der []byte) error
	NodeCertificate(ctx context.Context, node string) ([]byte, error)
	SetNodeDiskRoom(ctx context.Context, node string, room int64) error
	MarkLost(ctx context.Context, self string, msg func(in versions.Instance, node versions.Member, cp *versions.InstanceCheckpoint) string) ([]versions.Member, []versions.LostInstance, error)
	LostNodeOperations(ctx context.Context) ([]versions.Operation, error)
	ListNodeInstances(ctx context.Context, node string) ([]versions.Instance, error)
	UnfinishedOperations(ctx context.Context, node string) ([]versions.Operation, error)
	SetNodeState(ctx context.Context, name string, from []string, to string) (versions.Member, error)
	ListMembers(ctx context.Context) ([]versions.Member, error)
	GetMember(ctx context.Context, name string) (versions.Member, error)
	NodeURL(ctx context.Context, name string) (string, error)
	GetInstance(ctx context.Context, tenant, id string) (versions.Instance, error)
	GetOperation(ctx context.Context, tenant, id string) (versions.Operation, error)
	ClusterKey(ctx context.Context) ([]byte, error)
	CreateJoinToken(ctx context.Context, token, createdBy string, ttl time.Duration) (versions.JoinToken, error)
	UseJoinToken(ctx context.Context, token, node string) (versions.JoinToken, error)
	CreateNodeRole(ctx context.Context, node string) (role, password string, err error)
}

// Instances is what membership needs of this node's instances
// (lifecycle.Manager): clean up after the node was marked lost, and move
// them off a draining node.
type Instances interface {
	Reconcile(ctx context.Context) error
	// Evacuate moves in off this node; done false: try again later.
	Evacuate(ctx context.Context, in versions.Instance) (done bool, err error)
}

// Volumes hands the volumes this node holds of a project to object
// storage (volumes.Manager).
type Volumes interface {
	Handoff(ctx context.Context, tenant, project string)
}

// Operations settles the operations of a lost node (ops.Runner).
type Operations interface {
	Settle(ctx context.Context, op versions.Operation, err error)
}

// Observer is told of instances failed with their node.
type Observer interface {
	InstanceFailed(reason string)
}

// Deps is what New needs; every field is required but Checkpoints.
type Deps struct {
	Node    string // this node's name
	DataDir string // the disk whose size is the default disk capacity
	Version string // envd's, recorded in the node table
	Config  Config
	Store   Store
	// Instances, Volumes, Ops and Observer: see their types.
	Instances Instances
	Volumes   Volumes
	Ops       Operations
	Observer  Observer
	// Checkpoints runs a round of the periodic checkpoints due on this
	// node; it is called at each sweep, one round at a time.
	Checkpoints func(ctx context.Context)
	// Placer picks the node of a new instance (PlaceInstance).
	Placer *Placer
	Log    *slog.Logger
}

// Membership is the node's part in the cluster: its lease in the node
// table, the sweep for lost nodes, drains, the admin's view of the nodes
// and placement (api.ClusterCore's node routes), join tokens (api.JoinCore), and which
// node answers for an instance or an operation (api.ForwardCore).
type Membership struct {
	ctx         context.Context // the node's: the loops end with it
	node        string
	dataDir     string
	version     string
	cfg         Config
	store       Store
	instances   Instances
	volumes     Volumes
	ops         Operations
	observer    Observer
	checkpoints func(ctx context.Context)
	placer      *Placer
	log         *slog.Logger

	once     sync.Once
	draining atomic.Bool // a drain round runs
	// checkpointing: a round of checkpoints runs.
	checkpointing atomic.Bool
	renewed       time.Time // the last successful renewal (the loop's goroutine only)
	// healthySince is when renewals started succeeding without a
	// failure since (zero after a failure; the loop's goroutine only).
	healthySince time.Time
	// recordedCert is the certificate the node table holds for this node
	// (the loop's goroutine only, after join).
	recordedCert []byte
	wg           sync.WaitGroup
}

// New makes the membership part; its loops start at RegisterNode and end
// with ctx (Wait waits for them).
func New(ctx context.Context, d Deps) *Membership {
	if d.Checkpoints == nil {
		d.Checkpoints = func(context.Context) {}
	}
	return &Membership{ctx: ctx, node: d.Node, dataDir: d.DataDir, version: d.Version, cfg: d.Config, store: d.Store,
		instances: d.Instances, volumes: d.Volumes, ops: d.Ops, observer: d.Observer, checkpoints: d.Checkpoints, placer: d.Placer, log: d.Log}
}

// PlaceInstance picks the node of a new instance of project
// (Placer.PlaceInstance): placement is membership's, as it reads the
// nodes' leases, states and capacity.
func (mb *Membership) PlaceInstance(ctx context.Context, p types.Principal, project string, req types.CreateInstanceRequest) (node, apiURL, reason string, local bool, err error) {
	return mb.placer.PlaceInstance(ctx, p, project, req)
}

// Wait waits for the loops RegisterNode started, once ctx ended.
func (mb *Membership) Wait() { mb.wg.Wait() }

func withDefaults(c Config, dataDir string) Config {
	if c.Lease <= 0 {
		c.Lease = DefaultLease
	}
	if c.SweepInterval <= 0 {
		c.SweepInterval = DefaultSweepInterval
	}
	if c.Placement == "" {
		c.Placement = PlacementSpread
	}
	if c.Capacity.CPUs == 0 {
		c.Capacity.CPUs = float64(runtime.NumCPU())
	}
	over := func(n int64, k float64) int64 { return int64(float64(n) * max(k, 1)) }
	if c.Capacity.MemoryBytes == 0 {
		c.Capacity.MemoryBytes = over(hostMemory(), c.MemoryOvercommit)
	}
	if c.Capacity.DiskBytes == 0 && dataDir != "" {
		var st syscall.Statfs_t
		if syscall.Statfs(dataDir, &st) == nil {
			c.Capacity.DiskBytes = over(int64(st.Blocks)*st.Bsize, c.DiskOvercommit)
		}
	}
	return c
}

// hostMemory is MemTotal of /proc/meminfo in bytes, 0 if unreadable.
func hostMemory() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			var kb int64
			if _, err := fmt.Sscanf(strings.TrimSpace(rest), "%d kB", &kb); err == nil {
				return kb << 10
			}
		}
	}
	return 0
}

// RegisterNode joins the cluster: this node's API URL (other nodes forward
// requests about its instances there), capacity, labels and a lease; then
// it keeps the lease and looks for lost nodes until Close.
func (mb *Membership) RegisterNode(ctx context.Context, apiURL string) error {
	mb.cfg = withDefaults(mb.cfg, mb.dataDir)
	if _, err := mb.join(ctx, apiURL); err != nil {
		return err
	}
	mb.denyPeers(ctx)
	mb.reportDiskRoom(ctx)
	mb.once.Do(func() {
		mb.wg.Add(1)
		go func() {
			defer mb.wg.Done()
			mb.membershipLoop(mb.ctx, apiURL)
		}()
	})
	return nil
}

func (mb *Membership) join(ctx context.Context, apiURL string) (versions.Member, error) {
	c := mb.cfg
	cert := mb.tlsCertificate()
	m, err := mb.store.Join(ctx, versions.Registration{Name: mb.node, APIURL: apiURL, Version: mb.version, Labels: c.Labels,
		CPUs: c.Capacity.CPUs, MemoryBytes: c.Capacity.MemoryBytes, DiskBytes: c.Capacity.DiskBytes,
		InstanceSlots: c.Capacity.InstanceSlots, Lease: c.Lease, TLSCert: cert, RuntimeClasses: c.RuntimeClasses})
	if err == nil {
		mb.recordedCert = cert
	}
	return m, err
}

func (mb *Membership) tlsCertificate() []byte {
	if mb.cfg.TLSCertificate == nil {
		return nil
	}
	return mb.cfg.TLSCertificate()
}

// recordCertificate records the certificate the API serves when it is no
// longer the one the node table holds (an operator's certificate renewed
// on disk): until then the other nodes refuse this node's new one.
func (mb *Membership) recordCertificate(ctx context.Context) {
	cert := mb.tlsCertificate()
	if bytes.Equal(cert, mb.recordedCert) {
		return
	}
	if err := mb.store.SetNodeCertificate(ctx, mb.node, cert); err != nil {
		mb.log.Warn("record the API's new TLS certificate", "err", err)
		return
	}
	mb.recordedCert = cert
	mb.log.Info("recorded the API's new TLS certificate for the other nodes")
}

// NodeCertificate is the certificate (DER) node recorded for its API:
// the one certificate this node trusts for it (envd/node's peer
// transport); nil when it recorded none.
func (mb *Membership) NodeCertificate(ctx context.Context, node string) ([]byte, error) {
	return mb.store.NodeCertificate(ctx, node)
}

// LeaveCluster records a graceful shutdown: no placements come here until
// the node joins again.
func (mb *Membership) LeaveCluster(ctx context.Context) {
	if err := mb.store.LeaveNode(ctx, mb.node); err != nil {
		mb.log.Warn("leave the cluster", "err", err)
	}
}

// membershipLoop renews the lease every Lease/3, acts on a drain, and
// sweeps lost nodes every SweepInterval.
func (mb *Membership) membershipLoop(ctx context.Context, apiURL string) {
	c := mb.cfg
	renew := time.NewTicker(c.Lease / 3)
	sweep := time.NewTicker(c.SweepInterval)
	defer renew.Stop()
	defer sweep.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-renew.C:
			mb.renew(ctx, apiURL)
		case <-sweep.C:
			// After a pause of this process (a suspended machine, a stall)
			// renew first: the others' leases lapsed by the same clock.
			if time.Since(mb.renewed) > c.Lease/2 {
				mb.renew(ctx, apiURL)
			}
			// Only a node that has renewed without a failure for a whole
			// lease sweeps: after a database outage every live node has had
			// the time to renew before any marks another lost.
			if h := mb.healthySince; !h.IsZero() && time.Since(h) >= c.Lease {
				mb.sweepLost(ctx)
			}
			mb.denyPeers(ctx)
			if mb.checkpointing.CompareAndSwap(false, true) {
				mb.wg.Add(1)
				go func() {
					defer mb.wg.Done()
					defer mb.checkpointing.Store(false)
					mb.checkpoints(ctx)
				}()
			}
		}
	}
}

func (mb *Membership) renew(ctx context.Context, apiURL string) {
	rctx, cancel := context.WithTimeout(ctx, mb.cfg.Lease/3)
	defer cancel()
	state, err := mb.store.RenewLease(rctx, mb.node)
	if err == nil {
		mb.renewed = time.Now()
		if mb.healthySince.IsZero() {
			mb.healthySince = mb.renewed
		}
		mb.recordCertificate(rctx)
		mb.reportDiskRoom(rctx)
	} else {
		mb.healthySince = time.Time{}
	}
	switch {
	case errors.Is(err, versions.ErrFenced):
		// Marked lost while alive (a partition, a stalled database): its
		// instances were failed elsewhere; remove their containers, then
		// come back ready.
		mb.log.Warn("this node was marked lost: cleaning up and joining again", "node", mb.node)
		if err := mb.instances.Reconcile(ctx); err != nil {
			mb.log.Warn("reconcile after being marked lost", "err", err)
			return
		}
		if _, err := mb.join(ctx, apiURL); err != nil {
			mb.log.Warn("join again", "err", err)
		}
	case err != nil:
		mb.log.Warn("renew the node's lease", "err", err)
		return
	case state == versions.NodeDraining && mb.draining.CompareAndSwap(false, true):
		mb.wg.Add(1)
		go func() {
			defer mb.wg.Done()
			defer mb.draining.Store(false)
			mb.drainRound(ctx)
		}()
	}
}

// sweepLost marks lapsed nodes lost, fails their instances and settles
// their operations.
func (mb *Membership) sweepLost(ctx context.Context) {
	nodes, ins, err := mb.store.MarkLost(ctx, mb.node, lostMessage)
	if err != nil {
		mb.log.Warn("look for lost nodes", "err", err)
		return
	}
	for _, n := range nodes {
		mb.log.Warn("node lost: its lease expired", "node", n.Name, "lease_expired_at", n.LeaseExpiresAt)
	}
	for _, in := range ins {
		mb.observer.InstanceFailed(types.ReasonNodeLost)
		mb.log.Info("instance failed: its node was lost", "instance", in.ID, "node", in.Node)
	}
	ops, err := mb.store.LostNodeOperations(ctx)
	if err != nil {
		mb.log.Warn("operations of lost nodes", "err", err)
		return
	}
	for _, op := range ops {
		mb.ops.Settle(ctx, op, fmt.Errorf("node %s, which ran the %s, was lost (its lease expired)", op.Node, op.Kind))
	}
}

// lostMessage is what `envctl show` says of an instance failed with its
// node: what was lost, and how to get the project back.
func lostMessage(in versions.Instance, n versions.Member, cp *versions.InstanceCheckpoint) string {
	saved := fmt.Sprintf("version %d it started from", in.Version)
	if in.LastSavedVersion > 0 {
		saved = fmt.Sprintf("its last save, version %d", in.LastSavedVersion)
	}
	volumes := "volumes stay with the node"
	switch {
	case cp != nil && cp.Number > 0 && cp.Version <= in.LastSavedVersion:
		volumes = fmt.Sprintf("volumes as of checkpoint %d are in object storage (`envctl up %s --checkpoint %d` restores them, with that checkpoint's layer)",
			cp.Number, in.Project, cp.Number)
	case cp != nil && cp.Number > 0:
		saved = fmt.Sprintf("its checkpoint %d at %s, version %d (`envctl up %s --checkpoint %d` starts from it, its volumes with it)",
			cp.Number, cp.At.UTC().Format(time.RFC3339), cp.Version, in.Project, cp.Number)
		volumes = fmt.Sprintf("volumes as of checkpoint %d are in object storage", cp.Number)
	case cp != nil && cp.Version > in.LastSavedVersion:
		saved = fmt.Sprintf("its checkpoint at %s, version %d (`envctl up %s --version %d` starts from it)",
			cp.At.UTC().Format(time.RFC3339), cp.Version, in.Project, cp.Version)
	}
	what := "changes in its writable layer since " + saved
	if in.Retain {
		what = "its retained writable layer (unsaved since " + saved + ")"
	}
	return fmt.Sprintf("node %s was lost (lease expired at %s by the database clock): lost %s; %s; `envctl up %s` starts the project on another node",
		n.Name, n.LeaseExpiresAt.UTC().Format(time.RFC3339), what, volumes, in.Project)
}

// drainRound moves this draining node's instances off it (lifecycle's
// Evacuate), then, when none is left and no operation of this node runs,
// marks it drained. A round that leaves work runs again at the next
// renewal.
func (mb *Membership) drainRound(ctx context.Context) {
	ins, err := mb.store.ListNodeInstances(ctx, mb.node)
	if err != nil {
		mb.log.Warn("drain: list instances", "err", err)
		return
	}
	left := 0
	for _, in := range ins {
		done, err := mb.instances.Evacuate(ctx, in)
		if err != nil {
			mb.log.Warn("drain: instance", "instance", in.ID, "err", err)
		}
		if !done {
			left++
		}
	}
	if left > 0 {
		return
	}
	ops, err := mb.store.UnfinishedOperations(ctx, mb.node)
	if err != nil || len(ops) > 0 {
		return
	}
	// The volumes this node holds go to object storage, for the projects
	// its instances (hibernated now) belong to.
	handed := map[string]bool{}
	for _, in := range ins {
		if key := in.Tenant + "/" + in.Project; !handed[key] {
			handed[key] = true
			mb.volumes.Handoff(ctx, in.Tenant, in.Project)
		}
	}
	if _, err := mb.store.SetNodeState(ctx, mb.node, []string{versions.NodeDraining}, versions.NodeDrained); err != nil {
		mb.log.Warn("drain: mark drained", "err", err)
		return
	}
	mb.log.Info("node drained", "node", mb.node)
}

func needAdmin(p types.Principal, what string) error {
	if !p.Admin {
		return fmt.Errorf("%s needs an admin token: %w", what, errdefs.ErrPermissionDenied)
	}
	return nil
}

func viewMember(m versions.Member) types.Node {
	return types.Node{Name: m.Name, APIURL: m.APIURL, State: m.State, Labels: m.Labels,
		Capacity:  types.NodeCapacity{CPUs: m.CPUs, MemoryBytes: m.MemoryBytes, DiskBytes: m.DiskBytes, InstanceSlots: m.InstanceSlots},
		Used:      types.NodeCapacity{CPUs: m.UsedCPUs, MemoryBytes: m.UsedMemory, DiskBytes: m.UsedDisk, InstanceSlots: m.Instances},
		Instances: m.Instances, LeaseSeconds: m.Lease.Seconds(), LeaseExpiresAt: m.LeaseExpiresAt, Expired: m.Expired,
		RenewedAt: m.RenewedAt, StartedAt: m.StartedAt, StateChangedAt: m.StateChangedAt, Version: m.Version, Stopped: m.Stopped}
}

// ListNodes lists the cluster's nodes (admin).
func (mb *Membership) ListNodes(ctx context.Context, p types.Principal) ([]types.Node, error) {
	if err := needAdmin(p, "listing nodes"); err != nil {
		return nil, err
	}
	ms, err := mb.store.ListMembers(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]types.Node, 0, len(ms))
	for _, m := range ms {
		out = append(out, viewMember(m))
	}
	return out, nil
}

// GetNode returns one node (admin).
func (mb *Membership) GetNode(ctx context.Context, p types.Principal, name string) (types.Node, error) {
	if err := needAdmin(p, "reading a node"); err != nil {
		return types.Node{}, err
	}
	m, err := mb.store.GetMember(ctx, name)
	if err != nil {
		return types.Node{}, err
	}
	return viewMember(m), nil
}

func (mb *Membership) setNodeState(ctx context.Context, p types.Principal, name string, from []string, to string) (types.Node, error) {
	if err := needAdmin(p, "changing a node's state"); err != nil {
		return types.Node{}, err
	}
	m, err := mb.store.SetNodeState(ctx, name, from, to)
	if err != nil {
		return types.Node{}, err
	}
	return viewMember(m), nil
}

// CordonNode stops placements on a ready node (admin); cordoning a
// cordoned node changes nothing.
func (mb *Membership) CordonNode(ctx context.Context, p types.Principal, name string) (types.Node, error) {
	return mb.setNodeState(ctx, p, name, []string{versions.NodeReady, versions.NodeCordoned}, versions.NodeCordoned)
}

// UncordonNode makes a cordoned, draining or drained node ready (admin).
// A lost node comes back by itself when it renews.
func (mb *Membership) UncordonNode(ctx context.Context, p types.Principal, name string) (types.Node, error) {
	return mb.setNodeState(ctx, p, name, []string{versions.NodeReady, versions.NodeCordoned, versions.NodeDraining, versions.NodeDrained}, versions.NodeReady)
}

// DrainNode stops placements on a node and has it move its instances off
// (retained ones hibernated, others saved and hibernated), then marked
// drained (admin). The node acts at its next renewal (Lease/3).
func (mb *Membership) DrainNode(ctx context.Context, p types.Principal, name string) (types.Node, error) {
	return mb.setNodeState(ctx, p, name, []string{versions.NodeReady, versions.NodeCordoned, versions.NodeDraining}, versions.NodeDraining)
}

// JoinCommand is the command another machine runs to join (admin: it
// holds the database's and object storage's credentials).
func (mb *Membership) JoinCommand(ctx context.Context, p types.Principal) (types.JoinCommand, error) {
	if err := needAdmin(p, "the join command"); err != nil {
		return types.JoinCommand{}, err
	}
	j := mb.cfg.Join
	if j.Command == "" {
		return types.JoinCommand{}, fmt.Errorf("this node cannot tell how to join it (its database or registry is private to it): %w", errdefs.ErrFailedPrecondition)
	}
	return j, nil
}

// OperationOwner tells which node must answer the cancel of operation id:
// the node that runs it, when that is another live node; else this one
// (unknown, finished, or run by a node that is gone: the local handler
// records the request).
func (mb *Membership) OperationOwner(ctx context.Context, p types.Principal, id string) (node, apiURL string, local bool, err error) {
	op, err := mb.store.GetOperation(ctx, p.Tenant, id)
	if err != nil || op.Node == "" || op.Node == mb.node || (op.State != types.OpPending && op.State != types.OpRunning) {
		return op.Node, "", true, nil
	}
	m, err := mb.store.GetMember(ctx, op.Node)
	if err != nil || m.State == versions.NodeLost || m.Expired || m.Stopped {
		return op.Node, "", true, nil
	}
	return m.Name, m.APIURL, false, nil
}

// ClusterKey is the key the nodes of this database sign forwarded requests
// with (api.WithForwardKey).
func (mb *Membership) ClusterKey(ctx context.Context) ([]byte, error) {
	return mb.store.ClusterKey(ctx)
}

// InstanceOwner tells which node must answer requests about instance id:
// local when this node does (or when no other node can: the instance is
// unknown, ended, hibernated and so startable anywhere, or its node never
// registered an address), else that node's name and API URL.
func (mb *Membership) InstanceOwner(ctx context.Context, p types.Principal, id string) (node, apiURL string, local bool, err error) {
	in, err := mb.store.GetInstance(ctx, p.Tenant, id)
	if errors.Is(err, errdefs.ErrNotFound) {
		return "", "", true, nil // the local handler answers 404
	}
	if err != nil {
		return "", "", false, err
	}
	switch {
	case in.Node == "" || in.Node == mb.node:
		return in.Node, "", true, nil
	case in.State == types.StateTerminated || in.State == types.StateFailed:
		return in.Node, "", true, nil
	case in.State == types.StateStopped && in.HibernatedVersion > 0:
		return in.Node, "", true, nil // its layer is a version: it wakes on any node
	}
	u, err := mb.store.NodeURL(ctx, in.Node)
	if errors.Is(err, errdefs.ErrNotFound) {
		return in.Node, "", true, nil // the local handler names the node
	}
	if err != nil {
		return "", "", false, err
	}
	return in.Node, u, false, nil
}

// PeerFirewall keeps instances away from the cluster's other nodes
// (runtime.Runtime.SetPeerNodes): hosts are their API URLs' hosts, IPs or
// names; each call replaces the previous list.
type PeerFirewall interface {
	SetPeerNodes(ctx context.Context, hosts []string) error
}

// denyPeers gives the node's firewall the hosts of every other node in the
// node table, lost and stopped ones too (they may come back): their API,
// SSH endpoint and whatever else they serve is unreachable from this
// node's instances. A node removed from the table is dropped from the
// list. Called at join and every sweep interval.
func (mb *Membership) denyPeers(ctx context.Context) {
	fw := mb.cfg.Peers
	if fw == nil {
		return
	}
	members, err := mb.store.ListMembers(ctx)
	if err != nil {
		mb.log.Warn("list the cluster's nodes for the instance firewall", "err", err)
		return
	}
	var hosts []string
	for _, m := range members {
		if m.Name == mb.node {
			continue
		}
		if u, err := url.Parse(m.APIURL); err == nil && u.Hostname() != "" && !slices.Contains(hosts, u.Hostname()) {
			hosts = append(hosts, u.Hostname())
		}
	}
	if err := fw.SetPeerNodes(ctx, hosts); err != nil {
		mb.log.Warn("deny the cluster's other nodes to instances", "err", err)
	}
}

// reportDiskRoom records the node's room for new writable-layer limits
// (Config.DiskRoom) for placement.
func (mb *Membership) reportDiskRoom(ctx context.Context) {
	f := mb.cfg.DiskRoom
	if f == nil {
		return
	}
	room, ok := f()
	if !ok {
		return
	}
	if err := mb.store.SetNodeDiskRoom(ctx, mb.node, room); err != nil {
		mb.log.Warn("report the node's disk room", "err", err)
	}
}

// Join tokens: an admin makes one (CreateJoinToken), a new node started
// with `envd serve --join URL --token T` sends it to any node (Join) and
// gets the cluster's settings: database, registry and S3 with their
// credentials. The database credential is a login role of the new node's
// own (versions.CreateNodeRole: envd_node's rights, not the admin's). A
// token is stored hashed, expires by the database's clock and is used
// once.

// The bounds and default of a join token's lifetime.
const (
	MinJoinTokenTTL     = time.Minute
	MaxJoinTokenTTL     = 7 * 24 * time.Hour
	DefaultJoinTokenTTL = time.Hour
)

// JoinTokenPrefix starts every join token, so that one pasted in the
// wrong place (an API token's) is recognised.
const JoinTokenPrefix = "envdjoin_"

// CreateJoinToken makes a join token (admin: whoever holds it gets the
// cluster's credentials) and the short command that uses it.
func (mb *Membership) CreateJoinToken(ctx context.Context, p types.Principal, req types.JoinTokenRequest) (types.JoinToken, error) {
	if err := needAdmin(p, "a join token"); err != nil {
		return types.JoinToken{}, err
	}
	ttl := DefaultJoinTokenTTL
	if req.TTL != "" {
		d, err := time.ParseDuration(req.TTL)
		if err != nil || d < MinJoinTokenTTL || d > MaxJoinTokenTTL {
			return types.JoinToken{}, fmt.Errorf("ttl %q: a Go duration from %s to %s: %w", req.TTL, MinJoinTokenTTL, MaxJoinTokenTTL, errdefs.ErrInvalidArgument)
		}
		ttl = d
	}
	if mb.cfg.JoinConfig == nil {
		return types.JoinToken{}, fmt.Errorf("this node cannot tell how to join it (its database or registry is private to it): %w", errdefs.ErrFailedPrecondition)
	}
	self, err := mb.store.GetMember(ctx, mb.node)
	if err != nil {
		return types.JoinToken{}, fmt.Errorf("this node's URL: %w", err)
	}
	var b [24]byte
	_, _ = rand.Read(b[:])
	token := JoinTokenPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	t, err := mb.store.CreateJoinToken(ctx, token, p.Tenant, ttl)
	if err != nil {
		return types.JoinToken{}, err
	}
	args := []string{"envd", "serve", "--join", self.APIURL, "--token", token,
		"--data-dir", "/var/lib/envd", "--node", "NAME", "--listen", "0.0.0.0:7777"}
	mb.log.Info("join token made", "by", p.Tenant, "expires_at", t.ExpiresAt)
	return types.JoinToken{Token: token, ExpiresAt: t.ExpiresAt, Command: shellWords(args), Args: args}, nil
}

// Join answers a joining node's request with the cluster's settings, once
// per join token; an unknown, expired or used token is
// errdefs.ErrJoinToken (details.reason).
func (mb *Membership) Join(ctx context.Context, token string, req types.JoinRequest) (types.JoinConfig, error) {
	if req.Node == "" || len(req.Node) > 253 {
		return types.JoinConfig{}, fmt.Errorf("node %q: the joining node's name, 1-253 characters: %w", req.Node, errdefs.ErrInvalidArgument)
	}
	if mb.cfg.JoinConfig == nil {
		return types.JoinConfig{}, fmt.Errorf("this node cannot tell how to join it (its database or registry is private to it): %w", errdefs.ErrFailedPrecondition)
	}
	cfg, err := mb.cfg.JoinConfig()
	if err != nil {
		return types.JoinConfig{}, err
	}
	if _, err := mb.store.UseJoinToken(ctx, token, req.Node); err != nil {
		return types.JoinConfig{}, err
	}
	mb.log.Info("join token used", "node", req.Node)
	// The new node logs in as a role of its own (envd_node's rights:
	// migrations/0028_node_role.sql), not as this node's role.
	role, password, err := mb.store.CreateNodeRole(ctx, req.Node)
	switch {
	case errors.Is(err, errdefs.ErrFailedPrecondition):
		mb.log.Warn("the joining node gets this node's database role: no node role can be made", "node", req.Node, "err", err)
		cfg.Notes = append(cfg.Notes, "the database has no envd_node role (the role that ran envd's migrations may not create roles): this node was given the admin's database credentials; see docs/deploy.md, \"What a node can do\"")
	case err != nil:
		return types.JoinConfig{}, err
	default:
		if cfg.Database, err = versions.DSNWithRole(cfg.Database, role, password); err != nil {
			return types.JoinConfig{}, err
		}
		mb.log.Info("database role made for the joining node", "node", req.Node, "role", role)
	}
	return cfg, nil
}

// shellWords quotes each word that needs it for a POSIX shell.
func shellWords(words []string) string {
	out := ""
	for i, w := range words {
		if i > 0 {
			out += " "
		}
		safe := w != ""
		for _, r := range w {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' || r == '/' || r == ':' || r == '=' || r == '@' || r == ',' || r == '+' || r == '%') {
				safe = false
				break
			}
		}
		if safe {
			out += w
			continue
		}
		q := "'"
		for _, r := range w {
			if r == '\'' {
				q += `'\''`
			} else {
				q += string(r)
			}
		}
		out += q + "'"
	}
	return out
}
