package envd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/envd-dev/envd/api/errdefs"
	"github.com/envd-dev/envd/api/types"
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

// ClusterConfig is a node's membership settings; zero fields get defaults
// in clusterDefaults.
type ClusterConfig struct {
	// Lease is how long the node counts as alive after a renewal;
	// default DefaultLease. Shorter: lost nodes are found sooner, and a
	// node that cannot reach the database for longer (a partition) is
	// marked lost by the others.
	Lease time.Duration
	// SweepInterval is how often the node looks for lost nodes; default
	// DefaultSweepInterval.
	SweepInterval time.Duration
	Labels        map[string]string
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

// clusterState is the node's membership at run time.
type clusterState struct {
	ctx      context.Context // the service's
	once     sync.Once
	draining atomic.Bool // a drain round runs
	// checkpointing: a round of checkpoints runs (checkpoint.go).
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

func clusterDefaults(c ClusterConfig, dataDir string) ClusterConfig {
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
func (s *Service) RegisterNode(ctx context.Context, apiURL string) error {
	s.cfg.Cluster = clusterDefaults(s.cfg.Cluster, s.cfg.DataDir)
	if _, err := s.join(ctx, apiURL); err != nil {
		return err
	}
	s.denyPeers(ctx)
	s.reportDiskRoom(ctx)
	s.cluster.once.Do(func() {
		s.cluster.wg.Add(1)
		go func() {
			defer s.cluster.wg.Done()
			s.membershipLoop(s.cluster.ctx, apiURL)
		}()
	})
	return nil
}

func (s *Service) join(ctx context.Context, apiURL string) (versions.Member, error) {
	c := s.cfg.Cluster
	cert := s.tlsCertificate()
	m, err := s.store.Nodes.Join(ctx, versions.Registration{Name: s.cfg.Node, APIURL: apiURL, Version: BuildVersion, Labels: c.Labels,
		CPUs: c.Capacity.CPUs, MemoryBytes: c.Capacity.MemoryBytes, DiskBytes: c.Capacity.DiskBytes,
		InstanceSlots: c.Capacity.InstanceSlots, Lease: c.Lease, TLSCert: cert})
	if err == nil {
		s.cluster.recordedCert = cert
	}
	return m, err
}

func (s *Service) tlsCertificate() []byte {
	if s.cfg.Cluster.TLSCertificate == nil {
		return nil
	}
	return s.cfg.Cluster.TLSCertificate()
}

// recordCertificate records the certificate the API serves when it is no
// longer the one the node table holds (an operator's certificate renewed
// on disk): until then the other nodes refuse this node's new one.
func (s *Service) recordCertificate(ctx context.Context) {
	cert := s.tlsCertificate()
	if bytes.Equal(cert, s.cluster.recordedCert) {
		return
	}
	if err := s.store.Nodes.SetNodeCertificate(ctx, s.cfg.Node, cert); err != nil {
		s.log.Warn("record the API's new TLS certificate", "err", err)
		return
	}
	s.cluster.recordedCert = cert
	s.log.Info("recorded the API's new TLS certificate for the other nodes")
}

// NodeCertificate is the certificate (DER) node recorded for its API:
// the one certificate this node trusts for it (envd/node's peer
// transport); nil when it recorded none.
func (s *Service) NodeCertificate(ctx context.Context, node string) ([]byte, error) {
	return s.store.Nodes.NodeCertificate(ctx, node)
}

// LeaveCluster records a graceful shutdown: no placements come here until
// the node joins again.
func (s *Service) LeaveCluster(ctx context.Context) {
	if err := s.store.Nodes.LeaveNode(ctx, s.cfg.Node); err != nil {
		s.log.Warn("leave the cluster", "err", err)
	}
}

// membershipLoop renews the lease every Lease/3, acts on a drain, and
// sweeps lost nodes every SweepInterval.
func (s *Service) membershipLoop(ctx context.Context, apiURL string) {
	c := s.cfg.Cluster
	renew := time.NewTicker(c.Lease / 3)
	sweep := time.NewTicker(c.SweepInterval)
	defer renew.Stop()
	defer sweep.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-renew.C:
			s.renew(ctx, apiURL)
		case <-sweep.C:
			// After a pause of this process (a suspended machine, a stall)
			// renew first: the others' leases lapsed by the same clock.
			if time.Since(s.cluster.renewed) > c.Lease/2 {
				s.renew(ctx, apiURL)
			}
			// Only a node that has renewed without a failure for a whole
			// lease sweeps: after a database outage every live node has had
			// the time to renew before any marks another lost.
			if h := s.cluster.healthySince; !h.IsZero() && time.Since(h) >= c.Lease {
				s.sweepLost(ctx)
			}
			s.denyPeers(ctx)
			if s.cluster.checkpointing.CompareAndSwap(false, true) {
				s.cluster.wg.Add(1)
				go func() {
					defer s.cluster.wg.Done()
					defer s.cluster.checkpointing.Store(false)
					s.checkpointDue(ctx)
				}()
			}
		}
	}
}

func (s *Service) renew(ctx context.Context, apiURL string) {
	rctx, cancel := context.WithTimeout(ctx, s.cfg.Cluster.Lease/3)
	defer cancel()
	state, err := s.store.Nodes.RenewLease(rctx, s.cfg.Node)
	if err == nil {
		s.cluster.renewed = time.Now()
		if s.cluster.healthySince.IsZero() {
			s.cluster.healthySince = s.cluster.renewed
		}
		s.recordCertificate(rctx)
		s.reportDiskRoom(rctx)
	} else {
		s.cluster.healthySince = time.Time{}
	}
	switch {
	case errors.Is(err, versions.ErrFenced):
		// Marked lost while alive (a partition, a stalled database): its
		// instances were failed elsewhere; remove their containers, then
		// come back ready.
		s.log.Warn("this node was marked lost: cleaning up and joining again", "node", s.cfg.Node)
		if err := s.life.Reconcile(ctx); err != nil {
			s.log.Warn("reconcile after being marked lost", "err", err)
			return
		}
		if _, err := s.join(ctx, apiURL); err != nil {
			s.log.Warn("join again", "err", err)
		}
	case err != nil:
		s.log.Warn("renew the node's lease", "err", err)
		return
	case state == versions.NodeDraining && s.cluster.draining.CompareAndSwap(false, true):
		s.cluster.wg.Add(1)
		go func() {
			defer s.cluster.wg.Done()
			defer s.cluster.draining.Store(false)
			s.drainRound(ctx)
		}()
	}
}

// sweepLost marks lapsed nodes lost, fails their instances and settles
// their operations.
func (s *Service) sweepLost(ctx context.Context) {
	nodes, ins, err := s.store.Nodes.MarkLost(ctx, s.cfg.Node, lostMessage)
	if err != nil {
		s.log.Warn("look for lost nodes", "err", err)
		return
	}
	for _, n := range nodes {
		s.log.Warn("node lost: its lease expired", "node", n.Name, "lease_expired_at", n.LeaseExpiresAt)
	}
	for _, in := range ins {
		s.cfg.Observer.InstanceFailed(types.ReasonNodeLost)
		s.log.Info("instance failed: its node was lost", "instance", in.ID, "node", in.Node)
	}
	ops, err := s.store.Operations.LostNodeOperations(ctx)
	if err != nil {
		s.log.Warn("operations of lost nodes", "err", err)
		return
	}
	for _, op := range ops {
		s.ops.Settle(ctx, op, fmt.Errorf("node %s, which ran the %s, was lost (its lease expired)", op.Node, op.Kind))
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
func (s *Service) drainRound(ctx context.Context) {
	ins, err := s.store.Instances.ListNodeInstances(ctx, s.cfg.Node)
	if err != nil {
		s.log.Warn("drain: list instances", "err", err)
		return
	}
	left := 0
	for _, in := range ins {
		done, err := s.life.Evacuate(ctx, in)
		if err != nil {
			s.log.Warn("drain: instance", "instance", in.ID, "err", err)
		}
		if !done {
			left++
		}
	}
	if left > 0 {
		return
	}
	ops, err := s.store.Operations.UnfinishedOperations(ctx, s.cfg.Node)
	if err != nil || len(ops) > 0 {
		return
	}
	// The volumes this node holds go to object storage, for the projects
	// its instances (hibernated now) belong to.
	handed := map[string]bool{}
	for _, in := range ins {
		if key := in.Tenant + "/" + in.Project; !handed[key] {
			handed[key] = true
			s.vols.Handoff(ctx, in.Tenant, in.Project)
		}
	}
	if _, err := s.store.Nodes.SetNodeState(ctx, s.cfg.Node, []string{versions.NodeDraining}, versions.NodeDrained); err != nil {
		s.log.Warn("drain: mark drained", "err", err)
		return
	}
	s.log.Info("node drained", "node", s.cfg.Node)
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
func (s *Service) ListNodes(ctx context.Context, p types.Principal) ([]types.Node, error) {
	if err := needAdmin(p, "listing nodes"); err != nil {
		return nil, err
	}
	ms, err := s.store.Nodes.ListMembers(ctx)
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
func (s *Service) GetNode(ctx context.Context, p types.Principal, name string) (types.Node, error) {
	if err := needAdmin(p, "reading a node"); err != nil {
		return types.Node{}, err
	}
	m, err := s.store.Nodes.GetMember(ctx, name)
	if err != nil {
		return types.Node{}, err
	}
	return viewMember(m), nil
}

func (s *Service) setNodeState(ctx context.Context, p types.Principal, name string, from []string, to string) (types.Node, error) {
	if err := needAdmin(p, "changing a node's state"); err != nil {
		return types.Node{}, err
	}
	m, err := s.store.Nodes.SetNodeState(ctx, name, from, to)
	if err != nil {
		return types.Node{}, err
	}
	return viewMember(m), nil
}

// CordonNode stops placements on a ready node (admin); cordoning a
// cordoned node changes nothing.
func (s *Service) CordonNode(ctx context.Context, p types.Principal, name string) (types.Node, error) {
	return s.setNodeState(ctx, p, name, []string{versions.NodeReady, versions.NodeCordoned}, versions.NodeCordoned)
}

// UncordonNode makes a cordoned, draining or drained node ready (admin).
// A lost node comes back by itself when it renews.
func (s *Service) UncordonNode(ctx context.Context, p types.Principal, name string) (types.Node, error) {
	return s.setNodeState(ctx, p, name, []string{versions.NodeReady, versions.NodeCordoned, versions.NodeDraining, versions.NodeDrained}, versions.NodeReady)
}

// DrainNode stops placements on a node and has it move its instances off
// (retained ones hibernated, others saved and hibernated), then marked
// drained (admin). The node acts at its next renewal (Lease/3).
func (s *Service) DrainNode(ctx context.Context, p types.Principal, name string) (types.Node, error) {
	return s.setNodeState(ctx, p, name, []string{versions.NodeReady, versions.NodeCordoned, versions.NodeDraining}, versions.NodeDraining)
}

// JoinCommand is the command another machine runs to join (admin: it
// holds the database's and object storage's credentials).
func (s *Service) JoinCommand(ctx context.Context, p types.Principal) (types.JoinCommand, error) {
	if err := needAdmin(p, "the join command"); err != nil {
		return types.JoinCommand{}, err
	}
	j := s.cfg.Cluster.Join
	if j.Command == "" {
		return types.JoinCommand{}, fmt.Errorf("this node cannot tell how to join it (its database or registry is private to it): %w", errdefs.ErrFailedPrecondition)
	}
	return j, nil
}

// PlaceInstance picks the node of a new instance of project
// (cluster.Placer.PlaceInstance).
func (s *Service) PlaceInstance(ctx context.Context, p types.Principal, project string, req types.CreateInstanceRequest) (node, apiURL, reason string, local bool, err error) {
	return s.placer.PlaceInstance(ctx, p, project, req)
}

// OperationOwner tells which node must answer the cancel of operation id:
// the node that runs it, when that is another live node; else this one
// (unknown, finished, or run by a node that is gone: the local handler
// records the request).
func (s *Service) OperationOwner(ctx context.Context, p types.Principal, id string) (node, apiURL string, local bool, err error) {
	op, err := s.store.Operations.GetOperation(ctx, p.Tenant, id)
	if err != nil || op.Node == "" || op.Node == s.cfg.Node || (op.State != types.OpPending && op.State != types.OpRunning) {
		return op.Node, "", true, nil
	}
	m, err := s.store.Nodes.GetMember(ctx, op.Node)
	if err != nil || m.State == versions.NodeLost || m.Expired || m.Stopped {
		return op.Node, "", true, nil
	}
	return m.Name, m.APIURL, false, nil
}

// ClusterKey is the key the nodes of this database sign forwarded requests
// with (api.WithForwardKey).
func (s *Service) ClusterKey(ctx context.Context) ([]byte, error) {
	return s.store.Nodes.ClusterKey(ctx)
}
