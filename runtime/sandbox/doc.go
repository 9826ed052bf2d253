// Package sandbox is groundwork for a sandboxed runtime class: instances whose
// processes run on gVisor's user-space kernel (runsc) instead of the node's,
// and whose memory can be checkpointed and restored on another node.
//
// Its root tests pin down what docs/gvisor.md reports: runsc, installed by
// scripts/setup.sh into /usr/local/lib/envd/gvisor, runs a container under
// envd's private containerd when containerd's runc shim is told to use runsc
// as its OCI binary (runc options BinaryName), and that shim's checkpoint and
// restore reach runsc's. gVisor's own shim (containerd-shim-runsc-v1) is
// installed too but does not start on nodes without CAP_SYS_RESOURCE, and its
// task Checkpoint answers "not implemented" (docs/gvisor.md).
package sandbox
