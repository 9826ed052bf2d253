package node

import (
	"os"

	"github.com/envd-dev/envd/internal/proc"
)

// protectFromOOM lowers the oom_score_adj of envd and of the services this
// node started, so a tenant's workload is killed before them. Where the
// host does not allow it, it logs once and goes on: instances still run at
// a positive oom_score_adj.
func (n *Node) protectFromOOM() {
	pids := map[string]int{"envd": os.Getpid()}
	if n.db.server != nil {
		pids["postgresql"] = n.db.server.PID()
	}
	if n.ctrd.daemon != nil {
		pids["containerd"] = n.ctrd.daemon.Pid()
	}
	if n.ctrd.stargz != nil {
		pids["snapshotter"] = n.ctrd.stargz.Pid()
	}
	for name, pid := range pids {
		if err := proc.ProtectFromOOM(pid); err != nil {
			n.cfg.Logger.Warn("node services keep oom_score_adj 0; instances run at +500 and are still killed first", "service", name, "err", err)
			return
		}
	}
}

// reportCgroupLimits says once, at start, which limits this host cannot
// apply (an IO weight on cgroup v1 without blkio.weight is accepted and
// ignored).
func (n *Node) reportCgroupLimits() {
	if n.rt != nil && !n.rt.IOWeightApplied() {
		n.cfg.Logger.Info("this host has no block IO weight (blkio.weight or io.weight): io_weight limits are accepted and not applied")
	}
}
