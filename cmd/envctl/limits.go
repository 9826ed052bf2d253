package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/envd-dev/envd/api/types"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/envd-dev/envd/client"
)

// limitFlags are the resource-limit flags of "project create" and
// "project limits".
type limitFlags struct {
	memory, disk, cpus string
	pids               int64
	cpuWeight          uint64
	ioWeight           uint16
	allowEscalation    bool
}

func (f *limitFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&f.memory, "memory", "", "memory of each instance, e.g. 2G (default: the node's)")
	fs.Int64Var(&f.pids, "pids", 0, "most processes and threads in each instance (default: the node's)")
	fs.StringVar(&f.cpus, "cpus", "", "CPU quota of each instance in cores, e.g. 1.5 (default: the node's)")
	fs.Uint64Var(&f.cpuWeight, "cpu-weight", 0, "relative CPU share 1-10000, 100 = default")
	fs.Uint16Var(&f.ioWeight, "io-weight", 0, "relative block IO share 10-1000 (ignored where the host has no IO weight)")
	fs.StringVar(&f.disk, "disk", "", "writable layer size of each instance, e.g. 10G; counts toward max_stored_bytes")
	fs.BoolVar(&f.allowEscalation, "allow-privilege-escalation", false, "turn no_new_privs off, so a non-root user's sudo works")
}

// limits returns the limits the flags set; set is false when none was given.
func (f *limitFlags) limits(fs *pflag.FlagSet) (l types.Limits, set bool, err error) {
	for _, n := range []string{"memory", "pids", "cpus", "cpu-weight", "io-weight", "disk", "allow-privilege-escalation"} {
		set = set || fs.Changed(n)
	}
	if f.memory != "" {
		if l.MemoryBytes, err = types.ParseSize(f.memory); err != nil {
			return l, set, usageError{fmt.Errorf("--memory: %w", err)}
		}
	}
	if f.disk != "" {
		if l.DiskBytes, err = types.ParseSize(f.disk); err != nil {
			return l, set, usageError{fmt.Errorf("--disk: %w", err)}
		}
	}
	if f.cpus != "" {
		if l.CPUs, err = strconv.ParseFloat(f.cpus, 64); err != nil || l.CPUs < 0 {
			return l, set, usageError{fmt.Errorf("--cpus %q: a number of cores such as 1.5", f.cpus)}
		}
	}
	l.Pids, l.CPUWeight, l.IOWeight, l.AllowPrivilegeEscalation = f.pids, f.cpuWeight, f.ioWeight, f.allowEscalation
	return l, set, nil
}

func (a *app) limitsCommand() *cobra.Command {
	var f limitFlags
	cmd := &cobra.Command{
		Use:   "limits NAME [--memory SIZE] [--pids N] [--cpus N] [--cpu-weight N] [--io-weight N] [--disk SIZE]",
		Short: "Set the resource limits of a project's new instances",
		Long: `Replace a project's resource limits. A flag not given takes the node's
default; none at all clears the project's limits. A value above the tenant's
maximum is refused with quota_exceeded (HTTP 507). Running instances keep the
limits they started with ("envctl show" lists them).`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			l, _, err := f.limits(cmd.Flags())
			if err != nil {
				return err
			}
			return call(a, cmd, func(ctx context.Context, c *client.Client) (types.Project, error) {
				return c.SetProjectLimits(ctx, args[0], l)
			}, projectDetail)
		},
	}
	f.add(cmd.Flags())
	return cmd
}

// limitsText renders limits on one line; "-" when none is set.
func limitsText(l *types.Limits) string {
	if l == nil {
		return "-"
	}
	var parts []string
	if l.MemoryBytes > 0 {
		parts = append(parts, "memory "+formatBytes(l.MemoryBytes))
	}
	if l.Pids > 0 {
		parts = append(parts, fmt.Sprintf("pids %d", l.Pids))
	}
	if l.CPUs > 0 {
		parts = append(parts, "cpus "+strconv.FormatFloat(l.CPUs, 'f', -1, 64))
	}
	if l.CPUWeight > 0 {
		parts = append(parts, fmt.Sprintf("cpu weight %d", l.CPUWeight))
	}
	if l.IOWeight > 0 {
		parts = append(parts, fmt.Sprintf("io weight %d", l.IOWeight))
	}
	if l.DiskBytes > 0 {
		parts = append(parts, "disk "+formatBytes(l.DiskBytes))
	}
	if l.AllowPrivilegeEscalation {
		parts = append(parts, "privilege escalation allowed")
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

// quotaLimitFlags are the limit-maxima flags of "admin quota".
type quotaLimitFlags struct{ memory, disk string }

func (f *quotaLimitFlags) add(fs *pflag.FlagSet, q *types.Quota) {
	fs.StringVar(&f.memory, "max-memory", "", "largest memory limit of one instance, e.g. 8G")
	fs.Int64Var(&q.MaxPids, "max-pids", 0, "largest pids limit of one instance")
	fs.Float64Var(&q.MaxCPUs, "max-cpus", 0, "largest CPU quota of one instance, in cores")
	fs.StringVar(&f.disk, "max-disk", "", "largest writable layer of one instance, e.g. 50G")
}

func (f *quotaLimitFlags) apply(q *types.Quota) (err error) {
	if f.memory != "" {
		if q.MaxMemoryBytes, err = types.ParseSize(f.memory); err != nil {
			return usageError{fmt.Errorf("--max-memory: %w", err)}
		}
	}
	if f.disk != "" {
		if q.MaxDiskBytes, err = types.ParseSize(f.disk); err != nil {
			return usageError{fmt.Errorf("--max-disk: %w", err)}
		}
	}
	return nil
}

func quotaLimitRows(w io.Writer, q types.Quota) {
	row(w, "MAX MEMORY:", limit(q.MaxMemoryBytes, formatBytes))
	row(w, "MAX PIDS:", limit(q.MaxPids, count))
	cpus := "-"
	if q.MaxCPUs > 0 {
		cpus = strconv.FormatFloat(q.MaxCPUs, 'f', -1, 64)
	}
	row(w, "MAX CPUS:", cpus)
	row(w, "MAX DISK:", limit(q.MaxDiskBytes, formatBytes))
}
