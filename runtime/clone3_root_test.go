package runtime

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// clone3Probe calls clone3 with no arguments and prints the error: EINVAL
// (the call reached a kernel), ENOSYS (refused the way glibc falls back
// from to clone), or EPERM (refused the way on which every pthread_create
// fails: dpkg-deb's xz decoder, Python threads).
const clone3Probe = `package main

import (
	"fmt"
	"syscall"
)

func main() {
	_, _, errno := syscall.RawSyscall(435, 0, 0, 0) // clone3
	fmt.Println(errno.Error())
}
`

// On gVisor a program can create threads with glibc's clone3 as on runc:
// clone3 is never answered EPERM (runsc's --oci-seccomp ignores the
// profile's ENOSYS).
func TestRootGVisorClone3(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(clone3Probe), 0o644))
	bin := filepath.Join(t.TempDir(), "clone3")
	cmd := exec.Command("go", "build", "-o", bin, "main.go")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GO111MODULE=off")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "build the probe: %s", out)

	env := newTestEnvWith(t, NetworkConfig{Subnet: freeSubnet(t)}, func(c *Config) { requireGVisor(t) })
	mounts := []Mount{{Source: filepath.Dir(bin), Destination: "/probe", ReadOnly: true}}
	env.create(t, InstanceSpec{ID: "g", Class: ClassGVisor, Mounts: mounts})
	env.create(t, InstanceSpec{ID: "r", Mounts: mounts})

	got, errOut, code := env.run(t, "r", "/probe/clone3")
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, "function not implemented", strings.TrimSpace(got), "runc: containerd's profile answers ENOSYS")
	got, errOut, code = env.run(t, "g", "/probe/clone3")
	require.Equal(t, 0, code, errOut)
	assert.NotEqual(t, "operation not permitted", strings.TrimSpace(got), "gVisor: glibc must be able to fall back or go on")
	assert.Contains(t, []string{"invalid argument", "function not implemented"}, strings.TrimSpace(got))
}
