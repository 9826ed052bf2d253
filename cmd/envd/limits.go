package main

import (
	"fmt"
	"strconv"

	"github.com/envd-dev/envd/api/types"

	"github.com/spf13/pflag"

	"github.com/envd-dev/envd/envd"
)

// limitFlags are the node's default instance limits (envd up and serve).
type limitFlags struct {
	memory, pids, cpus, cpuWeight, ioWeight, disk string
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
