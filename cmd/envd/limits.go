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

func (f *limitFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&f.memory, "default-memory", env("ENVD_DEFAULT_MEMORY", ""), "memory limit of instances whose project sets none, e.g. 4G; empty = none (ENVD_DEFAULT_MEMORY)")
	fl.StringVar(&f.pids, "default-pids", env("ENVD_DEFAULT_PIDS", "4096"), "process limit of instances whose project sets none; 0 = none (ENVD_DEFAULT_PIDS)")
	fl.StringVar(&f.cpus, "default-cpus", env("ENVD_DEFAULT_CPUS", ""), "CPU quota in cores of instances whose project sets none; empty = none (ENVD_DEFAULT_CPUS)")
	fl.StringVar(&f.cpuWeight, "default-cpu-weight", env("ENVD_DEFAULT_CPU_WEIGHT", ""), "CPU weight 1-10000 of instances whose project sets none (ENVD_DEFAULT_CPU_WEIGHT)")
	fl.StringVar(&f.ioWeight, "default-io-weight", env("ENVD_DEFAULT_IO_WEIGHT", ""), "IO weight 10-1000 of instances whose project sets none (ENVD_DEFAULT_IO_WEIGHT)")
	fl.StringVar(&f.disk, "default-disk", env("ENVD_DEFAULT_DISK", "10G"), "writable-layer size of instances whose project sets none, e.g. 20G (ENVD_DEFAULT_DISK)")
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
