package main

import (
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// saveLimitTarget is issue 15's item 5: the eStargz save of the Graphviz
// change within this factor of tar | zstd -1 -T2 of the same upper dir.
const saveLimitTarget = 1.5

// saveLoad1 returns the 1-minute load average (0 if it cannot be read).
func saveLoad1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _, _ := strings.Cut(string(b), " ")
	v, _ := strconv.ParseFloat(f, 64)
	return v
}

// selfCPU returns the CPU time (user + system) this process has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// startSaveProfile starts a CPU profile of one envd save run when prefix is
// set, to PREFIX.VARIANT.RUN.pprof; the returned func stops it. Only envd's
// own variants are profiled (the others run in containerd or other
// processes).
func startSaveProfile(prefix, key string, run int) (func() error, error) {
	if prefix == "" || !slices.Contains([]string{"estargz", "zstd", "gzip"}, key) {
		return func() error { return nil }, nil
	}
	f, err := os.Create(fmt.Sprintf("%s.%s.%d.pprof", prefix, key, run))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}

// writeSaveLimit writes the comparison of issue 15's item 5 when both the
// eStargz save and tar | zstd ran: every round's pair with the load average
// before each run, the medians, and their ratio against the target. keys
// are the variant keys of runs, in order.
func writeSaveLimit(w io.Writer, keys []string, runs [][]saveRun) {
	es, tz := slices.Index(keys, "estargz"), slices.Index(keys, "tar")
	if es < 0 || tz < 0 {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "eStargz save against `tar | zstd -1 -T2` of the same upper dir (issue 15, item 5; target: ratio at most 1.5). "+
		"Rounds alternate the order of the variants; load is the 1-minute load average right before each run.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| round | eStargz total | CPU | load | tar \\| zstd total | CPU | load | ratio |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|---:|")
	var et, tt, ec, tc, ratios []time.Duration
	for i := range min(len(runs[es]), len(runs[tz])) {
		e, t := runs[es][i], runs[tz][i]
		et, tt = append(et, e.Total), append(tt, t.Total)
		ec, tc = append(ec, e.CPU), append(tc, t.CPU)
		ratios = append(ratios, time.Duration(float64(e.Total)/float64(t.Total)*float64(time.Second)))
		fmt.Fprintf(w, "| %d | %s | %s | %.2f | %s | %s | %.2f | %.2f |\n", i+1, seconds(e.Total), seconds(e.CPU), e.Load,
			seconds(t.Total), seconds(t.CPU), t.Load, e.Total.Seconds()/t.Total.Seconds())
	}
	me, mt := median(et), median(tt)
	verdict := "met"
	if me.Seconds()/mt.Seconds() > saveLimitTarget {
		verdict = "not met"
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Medians: eStargz %s, tar | zstd %s, ratio of medians **%.2f** (median of the per-round ratios %.2f): target of 1.5 %s.\n",
		seconds(me), seconds(mt), me.Seconds()/mt.Seconds(), median(ratios).Seconds(), verdict)
	fmt.Fprintf(w, "CPU time (user + system; eStargz: the bench process, tar | zstd: both processes), medians: eStargz %s, tar | zstd %s, ratio %.2f. "+
		"On a loaded machine the wall-clock ratio also depends on how the scheduler shares the cores between one Go process and two others.\n",
		seconds(median(ec)), seconds(median(tc)), median(ec).Seconds()/median(tc).Seconds())
}
