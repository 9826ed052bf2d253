package save

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/envd-dev/envd/runtime/agent"
)

// sandboxFIFOs is what a runtime with a sandboxed class tells of the FIFOs
// that live only inside an instance's sandbox (runtime.Runtime.SandboxFIFOs):
// no layer holds them, so no save can.
type sandboxFIFOs interface {
	SandboxFIFOs(ctx context.Context, id string) ([]string, error)
}

// EventNotSaved is the event of a save that leaves out something the user
// made: its data names the paths ("paths") and why ("reason").
const EventNotSaved = "not_saved"

// maxNamedFIFOs is how many paths a not_saved message names; its data
// has them all.
const maxNamedFIFOs = 5

// reportSandboxFIFOs says, as an event of the save, which FIFOs made
// inside the running gVisor instance id the version will not have (see
// runtime/agent/fifos.go), leaving out excluded paths, which no save
// keeps on any class. A listing that fails is said too: a save never drops
// them without a word.
func (s *Saver) reportSandboxFIFOs(ctx context.Context, ev Events, id string, excludes []string) {
	msg, data := s.sandboxFIFOs(ctx, ctx, id, excludes, "are not in the version")
	if msg != "" {
		ev.Event(ctx, EventNotSaved, msg, data)
	}
}

// StopFIFOs says which FIFOs made inside the running gVisor instance id
// its stop is about to lose (the stop's writable layer is kept, they are
// not in it): a message for the stop's transition, and the not_saved
// event's data, "" and nil when there are none (or id is not on gVisor).
// Every path that stops an instance and keeps its disk (stop, idle stop and
// idle hibernation, drain, expiry) says it this way: a stop never drops
// them without a word either.
// The listing is bounded by stopFIFOsTimeout: a stop does not wait longer
// for it (then it says the listing failed).
func (s *Saver) StopFIFOs(ctx context.Context, id string) (string, map[string]any) {
	lctx, cancel := context.WithTimeout(ctx, stopFIFOsTimeout)
	defer cancel()
	return s.sandboxFIFOs(ctx, lctx, id, nil, "are lost with this stop")
}

// stopFIFOsTimeout bounds a stop's listing of FIFOs (an exec and a walk
// of the root file system in the sandbox).
const stopFIFOsTimeout = 30 * time.Second

// sandboxFIFOs is the not_saved message and data of the FIFOs of gVisor
// instance id, but excludes, that a save or a stop leaves behind (lost
// says what happens to them); "" when there are none, or when ctx ended.
// The listing runs under lctx (ctx or shorter): its failure is said.
func (s *Saver) sandboxFIFOs(ctx, lctx context.Context, id string, excludes []string, lost string) (string, map[string]any) {
	sf, ok := s.Runtime.(sandboxFIFOs)
	if !ok {
		return "", nil
	}
	paths, err := sf.SandboxFIFOs(lctx, id)
	if err != nil {
		if ctx.Err() != nil {
			return "", nil
		}
		s.Log.Warn("listing the FIFOs of a gVisor instance", "instance", id, "err", err)
		return "FIFOs made inside this gVisor instance " + lost + " (gVisor keeps them in the sandbox's memory), and listing them failed: " + err.Error(),
			map[string]any{"reason": ReasonGVisorFIFO, "error": err.Error()}
	}
	var left []string
	truncated := false
	for _, p := range paths {
		if p == agent.FIFOsTruncated {
			truncated = true
			continue
		}
		if !excluded(p, excludes) {
			left = append(left, p)
		}
	}
	if len(left) == 0 {
		return "", nil
	}
	named := left[:min(len(left), maxNamedFIFOs)]
	more := ""
	if n := len(left) - len(named); n > 0 || truncated {
		more = fmt.Sprintf(" and %d more", n)
		if truncated {
			more += " (the list was cut)"
		}
	}
	return fmt.Sprintf("%d FIFOs made inside this gVisor instance %s: gVisor keeps FIFOs in the sandbox's memory, not in the writable layer; make them again after a restore (e.g. at start): %s%s",
			len(left), lost, strings.Join(named, ", "), more),
		map[string]any{"reason": ReasonGVisorFIFO, "paths": left, "truncated": truncated}
}

// ReasonGVisorFIFO is the not_saved reason of FIFOs made inside a gVisor
// instance.
const ReasonGVisorFIFO = "gvisor_fifo"

// excluded reports whether path is one of excludes or under one.
func excluded(path string, excludes []string) bool {
	for _, e := range excludes {
		e = strings.TrimSuffix(e, "/")
		if path == e || strings.HasPrefix(path, e+"/") {
			return true
		}
	}
	return false
}
