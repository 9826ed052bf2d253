package proc

import (
	"fmt"
	"os"
	"strconv"
)

// NodeOOMScoreAdj is the oom_score_adj envd gives itself and the services
// it starts (PostgreSQL, containerd, the lazy snapshotter), so that under
// memory pressure of the whole node the kernel kills a tenant's process
// first. Instances run at +500 (runtime's instanceOOMScoreAdj) either way.
const NodeOOMScoreAdj = -500

// ProtectFromOOM sets pid's oom_score_adj to NodeOOMScoreAdj. Lowering it
// needs CAP_SYS_RESOURCE, which some hosts (VMs, unprivileged containers)
// do not grant: the error says so and the caller logs it; the instances'
// positive adjustment still ranks them first.
func ProtectFromOOM(pid int) error {
	if pid <= 0 {
		return nil
	}
	path := fmt.Sprintf("/proc/%d/oom_score_adj", pid)
	if err := os.WriteFile(path, []byte(strconv.Itoa(NodeOOMScoreAdj)), 0); err != nil {
		return fmt.Errorf("oom_score_adj of pid %d (lowering it needs CAP_SYS_RESOURCE): %w", pid, err)
	}
	return nil
}
