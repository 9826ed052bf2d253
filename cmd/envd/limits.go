package main

import (
	"fmt"
	"strconv"

	"github.com/envd-dev/envd/api/types"

	"github.com/spf13/pflag"

	"github.com/envd-dev/envd/envd"
	"github.com/envd-dev/envd/envd/node"
)

// limitFlags are the node's default instance limits (envd up and serve).
type limitFlags struct {
	memory, pids, cpus, cpuWeight, ioWeight, disk string
	// How densely the node provisions them.
	diskReserve, diskOvercommit, memoryOvercommit string
	shimGroupSize                                 string
}

// register adds the flags with d's values as their defaults; a zero field
// is an empty flag (no limit).
func (f *limitFlags) register(fl *pflag.FlagSet, d types.Limits) {
	fl.StringVar(&f.memory, "default-memory", env("ENVD_DEFAULT_MEMORY", formatSize(d.MemoryBytes)), "memory limit of instances whose project sets none, e.g. 4G; empty = none (ENVD_DEFAULT_MEMORY)")
	fl.StringVar(&f.pids, "default-pids", env("ENVD_DEFAULT_PIDS", formatUint(uint64(d.Pids))), "process limit of instances whose project sets none; 0 = none (ENVD_DEFAULT_PIDS)")
	fl.StringVar(&f.cpus, "default-cpus", env("ENVD_DEFAULT_CPUS", formatCPUs(d.CPUs)), "CPU quota in cores of instances whose project sets none; empty = none (ENVD_DEFAULT_CPUS)")
	fl.StringVar(&f.cpuWeight, "default-cpu-weight", env("ENVD_DEFAULT_CPU_WEIGHT", formatUint(d.CPUWeight)), "CPU weight 1-10000 of instances whose project sets none (ENVD_DEFAULT_CPU_WEIGHT)")
	fl.StringVar(&f.ioWeight, "default-io-weight", env("ENVD_DEFAULT_IO_WEIGHT", formatUint(uint64(d.IOWeight))), "IO weight 10-1000 of instances whose project sets none (ENVD_DEFAULT_IO_WEIGHT)")
	fl.StringVar(&f.disk, "default-disk", env("ENVD_DEFAULT_DISK", formatSize(d.DiskBytes)), "writable-layer size of instances whose project sets none, e.g. 20G (ENVD_DEFAULT_DISK)")
}

// registerDensity adds the overcommit and reserve flags with c's values as
// their defaults.
func (f *limitFlags) registerDensity(fl *pflag.FlagSet, c node.Config) {
	fl.StringVar(&f.diskOvercommit, "disk-overcommit", env("ENVD_DISK_OVERCOMMIT", strconv.FormatFloat(c.DiskOvercommit, 'f', -1, 64)), "thin provisioning of writable layers: a new instance sets aside 1/N of the room the layers' limits may still fill against the disk's real free space, and placement offers N times the data dir's disk; 1 = limits fully reserved (ENVD_DISK_OVERCOMMIT)")
	fl.StringVar(&f.diskReserve, "disk-reserve", env("ENVD_DISK_RESERVE", formatSize(c.DiskReserveBytes)), "free disk the node keeps: past it new instances with a disk limit are refused with 503 insufficient_capacity; empty = 1G (ENVD_DISK_RESERVE)")
	fl.StringVar(&f.shimGroupSize, "shim-group-size", env("ENVD_SHIM_GROUP_SIZE", strconv.Itoa(c.ShimGroupSize)), "how many of one tenant's instances share a containerd shim process at most: a shim costs about 4 MB, and its death fails every instance it serves; 1 = a shim per instance (ENVD_SHIM_GROUP_SIZE)")
	fl.StringVar(&f.memoryOvercommit, "memory-overcommit", env("ENVD_MEMORY_OVERCOMMIT", strconv.FormatFloat(c.MemoryOvercommit, 'f', -1, 64)), "placement offers N times the host's memory to instances' memory limits (ceilings; the kernel's OOM killer acts per instance on real use); 1 = limits fully reserved (ENVD_MEMORY_OVERCOMMIT)")
}

// density sets cfg's overcommits and disk reserve from the flags.
func (f *limitFlags) density(cfg *node.Config) (err error) {
	if cfg.DiskOvercommit, err = strconv.ParseFloat(f.diskOvercommit, 64); err != nil || cfg.DiskOvercommit < 1 {
		return fmt.Errorf("--disk-overcommit %q: a number, 1 or more", f.diskOvercommit)
	}
	if cfg.MemoryOvercommit, err = strconv.ParseFloat(f.memoryOvercommit, 64); err != nil || cfg.MemoryOvercommit < 1 {
		return fmt.Errorf("--memory-overcommit %q: a number, 1 or more", f.memoryOvercommit)
	}
	if cfg.ShimGroupSize, err = strconv.Atoi(f.shimGroupSize); err != nil || cfg.ShimGroupSize < 1 {
		return fmt.Errorf("--shim-group-size %q: a number, 1 or more", f.shimGroupSize)
	}
	cfg.DiskReserveBytes = 0
	if f.diskReserve != "" {
		if cfg.DiskReserveBytes, err = types.ParseSize(f.diskReserve); err != nil {
			return fmt.Errorf("--disk-reserve: %w", err)
		}
	}
	return nil
}

// formatSize is n with the largest suffix types.ParseSize reads back
// exactly ("10G"); "" for 0.
func formatSize(n int64) string {
	if n == 0 {
		return ""
	}
	for _, u := range []struct {
		suffix string
		shift  uint
	}{{"T", 40}, {"G", 30}, {"M", 20}, {"K", 10}} {
		if n%(1<<u.shift) == 0 {
			return strconv.FormatInt(n>>u.shift, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

func formatUint(n uint64) string {
	if n == 0 {
		return ""
	}
	return strconv.FormatUint(n, 10)
}

func formatCPUs(c float64) string {
	if c == 0 {
		return ""
	}
	return strconv.FormatFloat(c, 'f', -1, 64)
}

func (f *limitFlags) limits() (types.Limits, error) {
	var (
		l   types.Limits
		err error
	)
	if f.memory != "" {
		if l.MemoryBytes, err = types.ParseSize(f.memory); err != nil {
			return l, fmt.Errorf("--default-memory: %w", err)
		}
	}
	if f.disk != "" {
		if l.DiskBytes, err = types.ParseSize(f.disk); err != nil {
			return l, fmt.Errorf("--default-disk: %w", err)
		}
	}
	if f.pids != "" {
		if l.Pids, err = strconv.ParseInt(f.pids, 10, 64); err != nil {
			return l, fmt.Errorf("--default-pids %q: a number", f.pids)
		}
	}
	if f.cpus != "" {
		if l.CPUs, err = strconv.ParseFloat(f.cpus, 64); err != nil {
			return l, fmt.Errorf("--default-cpus %q: a number of cores", f.cpus)
		}
	}
	if f.cpuWeight != "" {
		if l.CPUWeight, err = strconv.ParseUint(f.cpuWeight, 10, 64); err != nil {
			return l, fmt.Errorf("--default-cpu-weight %q: a number", f.cpuWeight)
		}
	}
	if f.ioWeight != "" {
		w, err := strconv.ParseUint(f.ioWeight, 10, 16)
		if err != nil {
			return l, fmt.Errorf("--default-io-weight %q: a number", f.ioWeight)
		}
		l.IOWeight = uint16(w)
	}
	return l, envd.ValidateLimits(l)
}
