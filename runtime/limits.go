package runtime

// Limits are an instance's resource limits. A zero field sets no limit of
// that kind; the node's defaults and the tenant's maxima are applied by the
// caller (envd), not here.
type Limits struct {
	MemoryBytes int64   // memory limit; swap is not allowed beyond it
	Pids        int64   // most processes and threads at once
	CPUWeight   uint64  // relative CPU share, 1-10000 on the cgroup v2 scale (100 = a default share)
	CPUQuota    float64 // CPU time in cores per period (1.5 = one and a half cores); 0 = unlimited
	IOWeight    uint16  // relative block IO weight, 10-1000 (100 = a default share)
	DiskBytes   int64   // size of the writable layer: a write past it fails with ENOSPC
}
