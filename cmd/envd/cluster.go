package main

import (
	"fmt"
	"strconv"

	"github.com/spf13/pflag"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd"
	"github.com/envd-dev/envd/envd/node"
)

// clusterFlags are the node's membership settings: labels, capacity and
// lease (envd.ClusterConfig).
type clusterFlags struct {
	labels             []string
	cpus, memory, disk string
	slots              int
}

func (c *clusterFlags) register(f *flags, fl *pflag.FlagSet) {
	fl.StringSliceVar(&c.labels, "label", splitList(env("ENVD_LABELS", "")), "node label KEY=VALUE for placement's node_selector, repeatable or comma-separated (ENVD_LABELS)")
	fl.DurationVar(&f.cfg.Lease, "lease", f.envDuration("ENVD_LEASE", f.cfg.Lease), "the node's lease in the cluster, renewed every third of it by the database's clock; a node whose lease lapses is lost and its instances fail (node_lost) within lease + sweep interval (ENVD_LEASE)")
	fl.DurationVar(&f.cfg.SweepInterval, "sweep-interval", f.envDuration("ENVD_SWEEP_INTERVAL", f.cfg.SweepInterval), "how often the node looks for lost nodes (ENVD_SWEEP_INTERVAL)")
	fl.StringVar(&c.cpus, "capacity-cpus", env("ENVD_CAPACITY_CPUS", ""), "CPUs the node offers placement; empty = the host's (ENVD_CAPACITY_CPUS)")
	fl.StringVar(&c.memory, "capacity-memory", env("ENVD_CAPACITY_MEMORY", ""), "memory the node offers placement (e.g. 16GiB); empty = the host's (ENVD_CAPACITY_MEMORY)")
	fl.StringVar(&c.disk, "capacity-disk", env("ENVD_CAPACITY_DISK", ""), "disk the node offers placement; empty = the data dir's file system size (ENVD_CAPACITY_DISK)")
	fl.StringVar(&f.cfg.Placement, "placement", env("ENVD_PLACEMENT", f.cfg.Placement), "how this node places the instances asked of it: spread (the cluster policy: fit, volumes, cache affinity, spread of a tenant's instances) or local (here whenever this node can take them) (ENVD_PLACEMENT)")
	fl.IntVar(&c.slots, "instance-slots", f.envInt("ENVD_INSTANCE_SLOTS", 0), "most live instances placed on the node; 0 = no bound (ENVD_INSTANCE_SLOTS)")
}

func (c *clusterFlags) apply(cfg *node.Config) error {
	labels, err := node.ParseLabels(c.labels)
	if err != nil {
		return fmt.Errorf("--label: %w", err)
	}
	cfg.Labels = labels
	cap := types.NodeCapacity{InstanceSlots: c.slots}
	if c.cpus != "" {
		if cap.CPUs, err = strconv.ParseFloat(c.cpus, 64); err != nil || cap.CPUs < 0 {
			return fmt.Errorf("--capacity-cpus %q: a number of cores", c.cpus)
		}
	}
	if c.memory != "" {
		if cap.MemoryBytes, err = types.ParseSize(c.memory); err != nil {
			return fmt.Errorf("--capacity-memory: %w", err)
		}
	}
	if c.disk != "" {
		if cap.DiskBytes, err = types.ParseSize(c.disk); err != nil {
			return fmt.Errorf("--capacity-disk: %w", err)
		}
	}
	if c.slots < 0 {
		return fmt.Errorf("--instance-slots %d: 0 or more", c.slots)
	}
	cfg.Capacity = cap
	if cfg.Placement != envd.PlacementSpread && cfg.Placement != envd.PlacementLocal {
		return fmt.Errorf("--placement %q: spread or local", cfg.Placement)
	}
	return nil
}
