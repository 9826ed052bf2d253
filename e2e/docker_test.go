package e2e

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/api/types"
)

// dockerRootfs is where the Debian base with Docker (Debian's docker.io) is
// kept between runs (scripts/docker-rootfs.sh: debootstrap and apt from the
// machine's Debian mirror).
const dockerRootfs = "/var/tmp/envd-e2e/rootfs-debian-docker"

var dockerBaseOnce struct {
	sync.Once
	err error
}

// importDockerDebian imports the Debian base with Docker as base image
// "debian-docker", once per test process.
func importDockerDebian(t *testing.T) string {
	t.Helper()
	const name = "debian-docker"
	dockerBaseOnce.Do(func() {
		var err error
		for attempt := 0; attempt < 3; attempt++ { // a mirror hiccup should not fail the test
			var out []byte
			if out, err = exec.Command("bash", "../scripts/docker-rootfs.sh", dockerRootfs).CombinedOutput(); err == nil {
				break
			}
			err = fmt.Errorf("docker-rootfs.sh: %v: %s", err, out)
		}
		if err != nil {
			dockerBaseOnce.err = err
			return
		}
		tarCmd := exec.Command("tar", "-C", dockerRootfs, "-cf", "-", ".")
		r, err := tarCmd.StdoutPipe()
		if err != nil {
			dockerBaseOnce.err = err
			return
		}
		if err := tarCmd.Start(); err != nil {
			dockerBaseOnce.err = err
			return
		}
		_, err = env.c.ImportImage(ctx(t), name, r)
		if werr := tarCmd.Wait(); err == nil {
			err = werr
		}
		dockerBaseOnce.err = err
	})
	require.NoError(t, dockerBaseOnce.err)
	return name
}

// busyboxDockerArchive is a `docker save` archive of image busybox:latest
// made on the node from its busybox-static: one layer of /bin/busybox and
// its applets' links.
func busyboxDockerArchive(t *testing.T) []byte {
	t.Helper()
	bin, err := os.ReadFile("/bin/busybox")
	require.NoError(t, err, "busybox-static must be installed at /bin/busybox")
	list, err := exec.Command("/bin/busybox", "--list").Output()
	require.NoError(t, err)
	var layer bytes.Buffer
	lw := tar.NewWriter(&layer)
	now := time.Unix(0, 0)
	require.NoError(t, lw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "bin/", Mode: 0o755, ModTime: now}))
	require.NoError(t, lw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "bin/busybox", Mode: 0o755, Size: int64(len(bin)), ModTime: now}))
	_, err = lw.Write(bin)
	require.NoError(t, err)
	for _, applet := range strings.Fields(string(list)) {
		if applet != "busybox" {
			require.NoError(t, lw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + applet, Linkname: "busybox", Mode: 0o777, ModTime: now}))
		}
	}
	require.NoError(t, lw.Close())
	diffID := sha256.Sum256(layer.Bytes())
	config, err := json.Marshal(map[string]any{
		"architecture": "amd64", "os": "linux",
		"config": map[string]any{"Cmd": []string{"sh"}, "Env": []string{"PATH=/bin"}},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + hex.EncodeToString(diffID[:])}},
	})
	require.NoError(t, err)
	configSum := sha256.Sum256(config)
	configName := hex.EncodeToString(configSum[:]) + ".json"
	manifest, err := json.Marshal([]map[string]any{{"Config": configName, "RepoTags": []string{"busybox:latest"}, "Layers": []string{"layer.tar"}}})
	require.NoError(t, err)
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	for _, f := range []struct {
		name string
		data []byte
	}{{"manifest.json", manifest}, {configName, config}, {"layer.tar", layer.Bytes()}} {
		require.NoError(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: 0o644, Size: int64(len(f.data)), ModTime: now}))
		_, err := tw.Write(f.data)
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	return out.Bytes()
}

// Docker inside an instance of a gvisor project: dockerd starts as the
// docs say, loads an image made on the node, runs a nested container and
// builds a two-line Dockerfile; the nested containers are processes of the
// instance's sandbox (its kernel, its memory limit), and the node's
// processes and kernel stay out of their sight even with --privileged and
// --pid=host.
func TestRootDockerInGVisor(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	base := importDockerDebian(t)
	p := fmt.Sprintf("docker-%d", projectSeq.Add(1))
	mem := int64(3 << 30)
	proj, err := env.c.CreateProject(c, types.CreateProjectRequest{Name: p, Base: base, RuntimeClass: "gvisor", Docker: true,
		Limits: &types.Limits{MemoryBytes: mem}})
	require.NoError(t, err)
	assert.True(t, proj.Docker)
	in := up(t, p, 0)
	_, err = env.c.WriteFile(c, in.ID, "/root/busybox.tar", bytes.NewReader(busyboxDockerArchive(t)))
	require.NoError(t, err)

	// As docs/api.md says to start it.
	mustSh(t, in.ID, "setsid dockerd --iptables=false --ip6tables=false </dev/null >/var/log/dockerd.log 2>&1 &")
	deadline := time.Now().Add(2 * time.Minute)
	for sh(t, in.ID, "docker info >/dev/null 2>&1").ExitCode != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("dockerd did not answer in 2 minutes; its log:\n%s", sh(t, in.ID, "tail -30 /var/log/dockerd.log").Stdout)
		}
		time.Sleep(500 * time.Millisecond) // poll interval
	}
	assert.Contains(t, mustSh(t, in.ID, "docker info --format '{{.Driver}}'"), "overlay2", "dockerd's overlay2 on the sandbox's tmpfs")

	assert.Equal(t, "Loaded image: busybox:latest", mustSh(t, in.ID, "docker load -i /root/busybox.tar"))
	assert.Equal(t, "hello from a nested container", mustSh(t, in.ID, "docker run --rm busybox echo hello from a nested container"))

	mustSh(t, in.ID, `mkdir -p /root/b && printf 'FROM busybox\nRUN echo built inside > /built\n' > /root/b/Dockerfile`)
	build := mustSh(t, in.ID, "docker build -t two-lines /root/b 2>&1")
	assert.Contains(t, build, "Successfully tagged two-lines:latest")
	assert.Equal(t, "built inside", mustSh(t, in.ID, "docker run --rm two-lines cat /built"))

	// The wall. The nested container's kernel is the instance's (gVisor's),
	// not the node's, even privileged.
	var uts unix.Utsname
	require.NoError(t, unix.Uname(&uts))
	nodeRelease := unix.ByteSliceToString(uts.Release[:])
	instRelease := mustSh(t, in.ID, "uname -r")
	assert.NotEqual(t, nodeRelease, instRelease)
	assert.Equal(t, instRelease, mustSh(t, in.ID, "docker run --rm --privileged busybox uname -r"))
	// Its host pid namespace is the sandbox's: dockerd is there, the
	// node's processes (this test, its PostgreSQL, containerd, runsc) are not.
	procs := mustSh(t, in.ID, "docker run --rm --privileged --pid=host busybox ps -o comm,args")
	assert.Contains(t, procs, "dockerd")
	for _, node := range []string{"postgres", "runsc-sandbox", "runsc-gofer"} {
		require.True(t, nodeRuns(t, node), "the node runs %s", node)
		assert.NotContains(t, procs, node, "a node process seen from a nested container")
	}
	// Its devices are the sandbox's: no disk or loop device of the node.
	devs := mustSh(t, in.ID, "docker run --rm --privileged busybox ls /dev")
	for _, d := range []string{"vda", "sda", "nvme0n1", "loop0", "kvm"} {
		assert.NotContains(t, strings.Fields(devs), d, "a node device seen from a nested container")
	}
	// It shares the instance's memory: the sandbox's MemTotal is the
	// instance's limit, inside and in the nested container alike.
	memTotal := strings.Fields(mustSh(t, in.ID, "grep MemTotal /proc/meminfo"))
	require.Len(t, memTotal, 3)
	assert.Equal(t, fmt.Sprint(mem>>10), memTotal[1])
	assert.Equal(t, memTotal, strings.Fields(mustSh(t, in.ID, "docker run --rm busybox grep MemTotal /proc/meminfo")))
	// No raw sockets (runsc without --net-raw): nothing crafted on the bridge.
	res := sh(t, in.ID, "docker run --rm --privileged --network=host busybox arping -c 1 -w 1 -I eth0 10.0.0.1")
	assert.NotEqual(t, 0, res.ExitCode)
	assert.Contains(t, res.Stderr, "Operation not permitted")
}

// Docker on runc is refused before anything is made, with failed_precondition,
// the reason and the way out: at project create (a runc or a node-default
// class), when turned on for a runc project, and when a docker project's
// class moves off gvisor.
func TestRootDockerRefusedOnRunc(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	requireDockerRefusal := func(err error, class string) {
		t.Helper()
		requireCode(t, err, "failed_precondition")
		var e *types.Error
		require.True(t, errors.As(err, &e))
		assert.Contains(t, e.Message, "docker inside an instance needs runtime class gvisor")
		assert.Contains(t, e.Message, "use runtime class gvisor")
		assert.Equal(t, map[string]any{"feature": "docker", "runtime_class": class, "required_runtime_class": "gvisor"}, e.Details)
	}
	for _, class := range []string{"runc", ""} {
		name := fmt.Sprintf("docker-runc-%d", projectSeq.Add(1))
		_, err := env.c.CreateProject(c, types.CreateProjectRequest{Name: name, Base: fixtureBase, RuntimeClass: class, Docker: true})
		requireDockerRefusal(err, class)
		_, err = env.c.GetProject(c, name)
		requireCode(t, err, "not_found")
	}

	name := fmt.Sprintf("docker-runc-%d", projectSeq.Add(1))
	_, err := env.c.CreateProject(c, types.CreateProjectRequest{Name: name, Base: fixtureBase, RuntimeClass: "runc"})
	require.NoError(t, err)
	_, err = env.c.SetProjectDocker(c, name, true)
	requireDockerRefusal(err, "runc")
	proj, err := env.c.GetProject(c, name)
	require.NoError(t, err)
	assert.False(t, proj.Docker)

	_, err = env.c.SetProjectRuntimeClass(c, name, "gvisor")
	require.NoError(t, err)
	proj, err = env.c.SetProjectDocker(c, name, true)
	require.NoError(t, err)
	assert.True(t, proj.Docker)
	_, err = env.c.SetProjectRuntimeClass(c, name, "runc")
	requireDockerRefusal(err, "runc")
	proj, err = env.c.GetProject(c, name)
	require.NoError(t, err)
	assert.Equal(t, "gvisor", proj.RuntimeClass, "the class stays")
	proj, err = env.c.SetProjectDocker(c, name, false)
	require.NoError(t, err)
	assert.False(t, proj.Docker)
	_, err = env.c.SetProjectRuntimeClass(c, name, "runc")
	require.NoError(t, err, "off first, then the class may move")
}

// nodeRuns says whether a process named name (its comm, or its argv[0]'s
// base name: runsc names its processes there) runs on the node.
func nodeRuns(t *testing.T, name string) bool {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	require.NoError(t, err)
	for _, e := range ents {
		if b, err := os.ReadFile("/proc/" + e.Name() + "/comm"); err == nil && strings.TrimSpace(string(b)) == name {
			return true
		}
		if b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil {
			if argv0, _, _ := strings.Cut(string(b), "\x00"); filepath.Base(argv0) == name {
				return true
			}
		}
	}
	return false
}
