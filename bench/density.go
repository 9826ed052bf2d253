package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
)

// runDensity is the density scenario (issue 31, item 3): the capacity
// scenario's measurement of -n idle busybox and -debian idle Debian
// instances on one node (memory of every part from /proc and the cgroups,
// start and removal of all, API p99 under 50 clients), run once with a
// shim per instance (the node default) and once with shim groups of
// densityGroupSize (all instances are of one tenant, so groups fill),
// each on a fresh node, then both side by side.
// densityGroupSize is the grouped side's shim group size: grouping is
// opt-in (runtime.DefaultShimGroupSize is 1), 16 the size it was built for.
const densityGroupSize = 16

func runDensity(ctx context.Context, cfg config, out io.Writer) error {
	cfg.capacity, cfg.capacityDebian, cfg.capacityNodes = cfg.densityN, cfg.densityDebian, 1
	type run struct {
		name string
		size int
		res  []capacityResult
	}
	runs := []*run{
		{name: "a shim per instance (--shim-group-size 1)", size: 1},
		{name: fmt.Sprintf("shims grouped (--shim-group-size %d)", densityGroupSize), size: densityGroupSize},
	}
	for _, r := range runs {
		c := cfg
		c.shimGroupSize = r.size
		fmt.Fprintf(out, "### %s\n\n", r.name)
		logf("density: %s", r.name)
		if err := capacity(ctx, c, out, func(res capacityResult) { r.res = append(r.res, res) }); err != nil {
			return fmt.Errorf("%s: %w", r.name, err)
		}
		fmt.Fprintln(out)
	}
	fmt.Fprintln(out, "### Side by side")
	fmt.Fprintln(out)
	var rows [][]string
	for _, r := range runs {
		for _, res := range r.res {
			rows = append(rows, []string{fmt.Sprintf("%d %s", res.n, res.group), strconv.Itoa(r.size), strconv.Itoa(res.shims),
				fmt.Sprintf("%.2f MB", res.shimsPer/1e6), fmt.Sprintf("%.2f MB", res.sumPer/1e6),
				seconds(res.startAll), seconds(res.rmAll), msf(res.listP99), msf(res.getP99), msf(res.execP99)})
		}
	}
	mdTable(out, []string{"instances", "shim group size", "shims", "shims per instance", "all parts per instance", "start all", "remove all", "list p99", "show p99", "exec p99"}, 1, rows)
	fmt.Fprintln(out)
	fmt.Fprintf(out, "- Load average at the end: %s.\n", loadAvg())
	return nil
}
