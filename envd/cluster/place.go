// Package cluster is the cluster of nodes: where a new instance goes.
// Place is the decision, without I/O (fit, disk room, volumes, cache
// affinity, spread, labels); Placer reads what it needs of the members and
// the project from the store and asks Place. Membership, leases and node
// loss are kept in PostgreSQL (versions) and driven by Membership (membership.go).
package cluster

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
)

// Candidate is a node as placement sees it.
type Candidate struct {
	Name    string
	State   string // only "ready" takes placements
	Lapsed  bool   // its lease expired by the database's clock
	Stopped bool   // shut down gracefully
	Labels  map[string]string
	// Capacity (0 = not known: no bound) and what live instances' limits
	// use of it.
	CPUs, UsedCPUs          float64
	MemoryBytes, UsedMemory int64
	DiskBytes, UsedDisk     int64
	// DiskRoom is the most bytes of new writable-layer limits the node
	// takes now, by its real free disk (thin provisioning);
	// DiskRoomKnown false = not reported.
	DiskRoom         int64
	DiskRoomKnown    bool
	Slots, Instances int // Slots 0 = no bound
	// HasImage: the node pulled the version's image (cache affinity).
	HasImage bool
	// HoldsVolumes: the project's volume data is on this node.
	HoldsVolumes bool
	// TenantInstances are the tenant's live instances on the node.
	TenantInstances int
	// RuntimeClasses the node can run; nil = not told (it is not passed
	// over for a class: it refuses one it lacks itself).
	RuntimeClasses []string
}

// Request is what a new instance needs of its node.
type Request struct {
	Limits   types.Limits
	Selector map[string]string
	// Class is the runtime class the project names; "" = each node's
	// default, which every node runs.
	Class string
	// VolumesOnlyOn names the node that holds the project's volume data
	// when no archive carries it elsewhere: the instance must go there or
	// start nowhere (never with an empty volume).
	VolumesOnlyOn string
	// VolumesCheckpoint, with VolumesOnlyOn, is the newest checkpoint that
	// archived the project's volumes: a refusal names it (`envctl up P
	// --checkpoint N` starts anywhere with them). Project names P.
	VolumesCheckpoint int
	Project           string
	// Local is the node asked: among equals it wins (no forwarding hop).
	Local string
	// LocalFirst: the node asked takes the instance whenever it is
	// eligible (its placement setting is "local"); the policy picks only
	// when it is not.
	LocalFirst bool
}

// Decision is the chosen node and why, in words a user reads in the
// instance's placement.
type Decision struct {
	Node   string
	Reason string
}

// The weights of the policy (docs/notes/cluster.md, "Membership, placement and
// node loss"): a node holding the project's volumes beats everything but a
// full node; the image already pulled (cache affinity) beats an empty
// node, but one more instance of the same tenant on that node costs more
// than the affinity gains, so a tenant's instances spread once each node
// has one.
const (
	weightVolumes  = 100
	weightImage    = 20
	weightTenant   = -30 // per instance of the tenant already there
	weightInstance = -1  // per instance of anyone already there
)

// Place picks the node for a new instance:
//  1. eligible: state ready (not cordoned, draining, drained or lost), lease
//     not lapsed, the project's runtime class among the node's, every
//     node_selector label equal, the instance's memory
//     and disk limits fit in the free capacity, its CPU limit in the
//     node's CPUs (CPU is overcommitted), a free slot; among those, the
//     nodes whose last reported room by their real free disk takes the
//     disk limit, unless none does;
//  2. when the project's volume data is on one node only (VolumesOnlyOn),
//     that node, or ErrFailedPrecondition (code volume_elsewhere);
//  3. the highest score: volumes held +100, image pulled +20, -30 per
//     instance of the tenant there, -1 per instance there; ties go to the
//     node asked, then by name.
//
// No eligible node is ErrResourceExhausted naming why each node was
// passed over; ErrFailedPrecondition (code failed_precondition, details
// runtime_class) when no member can run the project's class at all, which
// waiting does not change.
func Place(req Request, cands []Candidate) (Decision, error) {
	type scored struct {
		c     Candidate
		score int
	}
	if err := classRunsNowhere(req, cands); err != nil {
		return Decision{}, err
	}
	var ok []scored
	passed := map[string]string{}
	for _, c := range cands {
		if why := ineligible(req, c); why != "" {
			passed[c.Name] = why
			continue
		}
		s := weightTenant*c.TenantInstances + weightInstance*c.Instances
		if c.HoldsVolumes {
			s += weightVolumes
		}
		if c.HasImage {
			s += weightImage
		}
		ok = append(ok, scored{c, s})
	}
	if req.VolumesOnlyOn != "" {
		i := slices.IndexFunc(ok, func(s scored) bool { return s.c.Name == req.VolumesOnlyOn })
		if i < 0 {
			why := passed[req.VolumesOnlyOn]
			if why == "" {
				why = "not a member"
			}
			details := map[string]any{"node": req.VolumesOnlyOn}
			hint := ""
			if req.VolumesCheckpoint > 0 {
				details["checkpoint"] = req.VolumesCheckpoint
				hint = fmt.Sprintf(", or start from checkpoint %d, which archived it (envctl up %s --checkpoint %d)", req.VolumesCheckpoint, req.Project, req.VolumesCheckpoint)
			}
			return Decision{}, errdefs.WithDetails(fmt.Errorf("the project's volume data is on node %q only (%s) and no archive carries it elsewhere: "+
				"the instance would start with an empty volume; bring the node back, uncordon it, or archive and restore the volume%s: %w",
				req.VolumesOnlyOn, why, hint, errdefs.ErrVolumeElsewhere), details)
		}
		ok = []scored{ok[i]}
	}
	if len(ok) == 0 {
		return Decision{}, &NoNodeError{Passed: passed}
	}
	// Real free disk: a node whose reported room is below the disk limit
	// would refuse the instance itself (insufficient_capacity). It is
	// passed over when another node has room; when none has, the choice
	// stands and that node's answer, the node-level 503, reaches the
	// client rather than a placement refusal.
	if l := req.Limits.DiskBytes; l > 0 {
		roomy := slices.DeleteFunc(slices.Clone(ok), func(s scored) bool { return s.c.DiskRoomKnown && s.c.DiskRoom < l })
		if len(roomy) > 0 && len(roomy) < len(ok) {
			for _, s := range ok {
				if !slices.ContainsFunc(roomy, func(r scored) bool { return r.c.Name == s.c.Name }) {
					passed[s.c.Name] = fmt.Sprintf("its real free disk takes new disk limits of %d bytes, %d asked", s.c.DiskRoom, l)
				}
			}
			ok = roomy
		}
	}
	if req.LocalFirst {
		if i := slices.IndexFunc(ok, func(s scored) bool { return s.c.Name == req.Local }); i >= 0 {
			return Decision{Node: req.Local, Reason: fmt.Sprintf("placed on %s: the node asked, which places locally when it can (placement local)", req.Local)}, nil
		}
	}
	slices.SortStableFunc(ok, func(a, b scored) int {
		if a.score != b.score {
			return cmp.Compare(b.score, a.score)
		}
		if (a.c.Name == req.Local) != (b.c.Name == req.Local) {
			if a.c.Name == req.Local {
				return -1
			}
			return 1
		}
		return strings.Compare(a.c.Name, b.c.Name)
	})
	best := ok[0].c
	var why []string
	if req.VolumesOnlyOn != "" {
		why = append(why, "holds the project's volume data (no archive carries it elsewhere)")
	} else if best.HoldsVolumes {
		why = append(why, "holds the project's volume data")
	}
	if best.HasImage {
		why = append(why, "has the version's image (cache affinity)")
	}
	why = append(why, fmt.Sprintf("%d of the tenant's instances there", best.TenantInstances),
		fmt.Sprintf("%d instances there", best.Instances))
	if len(req.Selector) > 0 {
		why = append(why, "matches node_selector "+labelText(req.Selector))
	}
	reason := fmt.Sprintf("placed on %s: %s (score %d of %d eligible nodes)", best.Name, strings.Join(why, ", "), ok[0].score, len(ok))
	if len(passed) > 0 {
		reason += "; passed over: " + describe(passed)
	}
	return Decision{Node: best.Name, Reason: reason}, nil
}

// NoNodeRetryAfter is when a create that no node could take may be tried
// again: capacity frees and cordons lift on their own time.
const NoNodeRetryAfter = 10 * time.Second

// NoNodeError is Place's answer when no node can take the instance:
// errdefs.ErrResourceExhausted (429) with Retry-After, and why each node
// was passed over in its details (kind "placement").
type NoNodeError struct {
	Passed map[string]string // node -> why
}

func (e *NoNodeError) Error() string {
	if len(e.Passed) == 0 {
		return "no node can take the instance: no node joined the cluster: resource exhausted"
	}
	return fmt.Sprintf("no node can take the instance: %s: resource exhausted", describe(e.Passed))
}
func (e *NoNodeError) Unwrap() error             { return errdefs.ErrResourceExhausted }
func (e *NoNodeError) RetryAfter() time.Duration { return NoNodeRetryAfter }
func (e *NoNodeError) Details() map[string]any {
	return map[string]any{"kind": "placement", "nodes": e.Passed, "retry_after_seconds": int(NoNodeRetryAfter.Seconds())}
}

// ineligible says why c cannot take the instance, "" when it can.
func ineligible(req Request, c Candidate) string {
	switch {
	case c.State != "ready":
		return c.State
	case c.Lapsed:
		return "lease expired"
	case c.Stopped:
		return "shut down"
	}
	if !runsClass(c, req.Class) {
		return fmt.Sprintf("cannot run runtime class %s (runs %s)", req.Class, strings.Join(c.RuntimeClasses, ", "))
	}
	for _, k := range slices.Sorted(maps.Keys(req.Selector)) {
		if v, ok := c.Labels[k]; !ok || v != req.Selector[k] {
			return fmt.Sprintf("no label %s=%s", k, req.Selector[k])
		}
	}
	l := req.Limits
	switch {
	case c.Slots > 0 && c.Instances >= c.Slots:
		return fmt.Sprintf("all %d instance slots taken", c.Slots)
	case c.CPUs > 0 && l.CPUs > c.CPUs:
		// CPU time is shared by weight, not reserved: development
		// environments idle most of the time, so the sum of CPU limits
		// may exceed the node (memory and disk, which cannot be taken
		// back, may not). One instance still cannot ask more than the node has.
		return fmt.Sprintf("%.2f CPUs asked, the node has %.2f", l.CPUs, c.CPUs)
	case c.MemoryBytes > 0 && l.MemoryBytes > 0 && c.UsedMemory+l.MemoryBytes > c.MemoryBytes:
		return fmt.Sprintf("%d of %d memory bytes free, %d asked", c.MemoryBytes-c.UsedMemory, c.MemoryBytes, l.MemoryBytes)
	case c.DiskBytes > 0 && l.DiskBytes > 0 && c.UsedDisk+l.DiskBytes > c.DiskBytes:
		return fmt.Sprintf("%d of %d disk bytes free, %d asked", c.DiskBytes-c.UsedDisk, c.DiskBytes, l.DiskBytes)
	}
	return ""
}

// runsClass reports whether c can run class ("" = its default: yes).
func runsClass(c Candidate, class string) bool {
	return class == "" || c.RuntimeClasses == nil || slices.Contains(c.RuntimeClasses, class)
}

// classRunsNowhere refuses a class that no member can run (lost and
// cordoned ones included: a class is not what a node gains by coming back).
func classRunsNowhere(req Request, cands []Candidate) error {
	if req.Class == "" || len(cands) == 0 {
		return nil
	}
	runs := map[string]string{}
	for _, c := range cands {
		if runsClass(c, req.Class) {
			return nil
		}
		runs[c.Name] = strings.Join(c.RuntimeClasses, ", ")
	}
	return errdefs.WithDetails(fmt.Errorf("no node of the cluster can run runtime class %s (%s): install it on a node (docs/gvisor.md) or set the project's class: %w",
		req.Class, describe(runs), errdefs.ErrFailedPrecondition), map[string]any{"runtime_class": req.Class, "nodes": runs})
}

func describe(passed map[string]string) string {
	var out []string
	for _, n := range slices.Sorted(maps.Keys(passed)) {
		out = append(out, n+" ("+passed[n]+")")
	}
	return strings.Join(out, ", ")
}

func labelText(m map[string]string) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, k+"="+m[k])
	}
	return strings.Join(out, ",")
}
