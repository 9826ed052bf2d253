package k8stest

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/internal/nodeimage"
)

// The test cluster's network, all of it made by the test and removed
// afterwards: a bridge of its own for the pods (its gateway is the node's
// address, where the apiserver and S3 listen), and a Service network that
// exists only in kube-proxy's nftables rules. Nothing is sent anywhere else.
const (
	bridgeName  = "envdk8s0"
	gatewayIP   = "10.123.0.1"
	podCIDR     = "10.123.0.0/24"
	serviceCIDR = "10.124.0.0/24"
	// The overlay deploy/kubernetes/overlays/single-node fixes these.
	envdServiceIP     = "10.124.0.10"
	registryServiceIP = "10.124.0.20"

	nodeName   = "envd-k8s-test"
	pauseImage = "envd.local/pause:k8s-test"
	nodeImage  = "envd.local/envd-node:dev"
)

// The chains the kubelet makes in the host's iptables (it has no setting to
// keep them to itself); the test removes them when it made them.
var kubeletChains = []string{"KUBE-FIREWALL", "KUBE-KUBELET-CANARY", "KUBE-IPTABLES-HINT"}

// k8sBinDir is where scripts/k8s-build.sh puts the Kubernetes binaries.
func k8sBinDir() string {
	if d := os.Getenv("ENVD_K8S_BIN_DIR"); d != "" {
		return d
	}
	return "/usr/local/lib/envd/k8s/v1.34.4/bin"
}

// cluster is a single-node Kubernetes run from the binaries scripts/k8s-build.sh
// built: etcd, apiserver, controller-manager, scheduler, kube-proxy on the
// host; containerd (CRI) and the kubelet in a mount namespace of their own,
// so their mounts never reach the host.
type cluster struct {
	t          *testing.T
	dir        string
	bin        string
	kubeconfig string
	token      string
	ca         *ca
	apiserver  string // https://IP:PORT
	criSock    string
	cgroupRoot string // "/envd-k8s-..." in every v1 hierarchy
	holder     *proc  // the mount namespace's first process
	cleanups   []func()
	timings    []string
}

// proc is a process the test started, in a process group of its own.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

func (c *cluster) onCleanup(f func()) { c.cleanups = append(c.cleanups, f) }

// close undoes everything, last made first; it runs even when the test
// failed half way.
func (c *cluster) close() {
	for i := len(c.cleanups) - 1; i >= 0; i-- {
		c.cleanups[i]()
	}
}

func (c *cluster) mark(what string, since time.Time) {
	s := fmt.Sprintf("%s: %.1f s", what, time.Since(since).Seconds())
	c.timings = append(c.timings, s)
	c.t.Log(s)
}

// start runs a process with its output in dir/logs/NAME.log; cleanup stops
// it (SIGTERM to its group, SIGKILL after 15 s).
func (c *cluster) start(name string, args ...string) *proc {
	c.t.Helper()
	logPath := filepath.Join(c.dir, "logs", name+".log")
	require.NoError(c.t, os.MkdirAll(filepath.Dir(logPath), 0o755))
	lf, err := os.Create(logPath)
	require.NoError(c.t, err)
	defer lf.Close()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	require.NoError(c.t, cmd.Start(), "start %s", name)
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	c.onCleanup(func() { p.stop() })
	return p
}

func (p *proc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// logTail is the end of the process's log, for failure messages.
func (p *proc) logTail() string {
	b, _ := os.ReadFile(p.log)
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}

// run runs a command to its end and fails the test on an error.
func (c *cluster) run(args ...string) string {
	c.t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	require.NoError(c.t, err, "%s: %s", strings.Join(args, " "), out)
	return string(out)
}

// kubectl runs the built kubectl against the cluster.
func (c *cluster) kubectl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, "kubectl"), append([]string{"--kubeconfig", c.kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

func (c *cluster) mustKubectl(ctx context.Context, args ...string) string {
	c.t.Helper()
	out, err := c.kubectl(ctx, args...)
	require.NoError(c.t, err)
	return out
}

func freePort(t *testing.T, host string) int {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// waitFor polls cond every interval until it holds or timeout passes; the
// failure names what was waited for and cond's last error.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		if last = cond(); last == nil {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	require.FailNowf(t, "timed out", "waiting %v for %s: %v", timeout, what, last)
}

// startCluster brings the cluster up in dir: network, PKI, etcd, control
// plane, containerd and kubelet, kube-proxy, the pause image; it returns
// when the node is Ready.
func startCluster(t *testing.T, dir string) *cluster {
	c := &cluster{t: t, dir: dir, bin: k8sBinDir(), token: randHex(16)}
	t.Cleanup(c.close)
	for _, b := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy", "kubectl"} {
		_, err := os.Stat(filepath.Join(c.bin, b))
		require.NoError(t, err, "%s is missing: run scripts/k8s-build.sh (scripts/setup.sh does)", b)
	}
	for _, b := range []string{"etcd", "nft", "unshare", "nsenter", "iptables", "ip6tables", "ctr", "containerd"} {
		_, err := exec.LookPath(b)
		require.NoError(t, err, "%s is not on PATH (scripts/setup.sh and scripts/k8s-build.sh install it)", b)
	}
	begin := time.Now()
	c.network()
	c.pki()
	c.controlPlane()
	c.node()
	c.kubeProxy()
	c.mark("cluster up (node Ready)", begin)
	return c
}

// network makes the pods' bridge with the node's address; the CNI bridge
// plugin finds it and uses it as the pods' gateway.
func (c *cluster) network() {
	t := c.t
	_, err := net.InterfaceByName(bridgeName)
	require.Error(t, err, "bridge %s exists already: another run of this test, or a leftover (ip link del %s)", bridgeName, bridgeName)
	out, _ := exec.Command("nft", "list", "tables").CombinedOutput()
	require.NotContains(t, string(out), "kube-proxy", "nftables already has kube-proxy tables: another cluster runs on this machine")
	tablesBefore := string(out)
	preexisting := map[string]bool{}
	for _, bin := range []string{"iptables", "ip6tables"} {
		for _, table := range []string{"filter", "nat", "mangle"} {
			for _, ch := range listChains(bin, table) {
				preexisting[bin+"/"+table+"/"+ch] = true
			}
		}
	}
	c.run("ip", "link", "add", bridgeName, "type", "bridge")
	c.onCleanup(func() {
		// Rules first (they name chains that jump), then the bridge.
		removeChains(t, preexisting, kubeletChains, nil)
		removeEmptyTables(tablesBefore)
		for _, fam := range []string{"ip", "ip6"} {
			_ = exec.Command("nft", "delete", "table", fam, "kube-proxy").Run()
		}
		_ = exec.Command("ip", "link", "del", bridgeName).Run()
	})
	c.run("ip", "addr", "add", gatewayIP+"/24", "dev", bridgeName)
	c.run("ip", "link", "set", bridgeName, "up")
}

func (c *cluster) pki() {
	t := c.t
	var err error
	c.ca, err = newCA()
	require.NoError(t, err)
	pki := filepath.Join(c.dir, "pki")
	require.NoError(t, os.MkdirAll(pki, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(pki, "ca.crt"), c.ca.pem, 0o644))
	crt, key, err := c.ca.serving("kube-apiserver", []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "localhost"},
		[]net.IP{net.ParseIP(gatewayIP), net.ParseIP("10.124.0.1"), net.ParseIP("127.0.0.1")})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(pki, "apiserver.crt"), crt, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(pki, "apiserver.key"), key, 0o600))
	_, _, err = writeServiceAccountKeys(pki)
	require.NoError(t, err)
	// One static token, a cluster admin: components and kubectl share it
	// (the test cluster authorizes everything).
	require.NoError(t, os.WriteFile(filepath.Join(pki, "tokens.csv"),
		[]byte(c.token+",admin,admin,system:masters\n"), 0o600))
}

func (c *cluster) controlPlane() {
	t := c.t
	pki := filepath.Join(c.dir, "pki")
	etcdPort, peerPort := freePort(t, "127.0.0.1"), freePort(t, "127.0.0.1")
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(etcdPort)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	etcdProc := c.start("etcd", "etcd", "--name", "default", "--data-dir", filepath.Join(c.dir, "etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "default="+peerURL, "--log-level", "warn")

	apiPort := freePort(t, gatewayIP)
	c.apiserver = "https://" + net.JoinHostPort(gatewayIP, strconv.Itoa(apiPort))
	api := c.start("kube-apiserver", filepath.Join(c.bin, "kube-apiserver"),
		"--etcd-servers", etcdURL,
		// Beyond loopback: pods (and the kubelet's node address) reach it
		// on the bridge's gateway.
		"--bind-address", gatewayIP, "--advertise-address", gatewayIP, "--secure-port", strconv.Itoa(apiPort),
		"--tls-cert-file", filepath.Join(pki, "apiserver.crt"), "--tls-private-key-file", filepath.Join(pki, "apiserver.key"),
		"--token-auth-file", filepath.Join(pki, "tokens.csv"), "--authorization-mode", "AlwaysAllow",
		"--service-cluster-ip-range", serviceCIDR,
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", filepath.Join(pki, "sa.pub"), "--service-account-signing-key-file", filepath.Join(pki, "sa.key"),
		// logs and exec reach the kubelet at the node's InternalIP.
		"--kubelet-preferred-address-types", "InternalIP,Hostname",
		"--allow-privileged", "--profiling=false", "--enable-priority-and-fairness=false",
		"--cert-dir", filepath.Join(c.dir, "apiserver"))

	c.writeKubeconfig()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.ca.pem)
	hc := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	// A bound, not a wait: ready in seconds on an idle machine, it took
	// longer than 90 s with four test packages at once at load average 40.
	waitFor(t, "kube-apiserver /readyz", 4*time.Minute, func() error {
		if api.exited() || etcdProc.exited() {
			return fmt.Errorf("exited:\napiserver: %s\netcd: %s", api.logTail(), etcdProc.logTail())
		}
		req, _ := http.NewRequest(http.MethodGet, c.apiserver+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+c.token)
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	})
	c.start("kube-controller-manager", filepath.Join(c.bin, "kube-controller-manager"),
		"--kubeconfig", c.kubeconfig, "--leader-elect=false", "--use-service-account-credentials=false",
		"--bind-address", "127.0.0.1", "--secure-port", strconv.Itoa(freePort(t, "127.0.0.1")),
		"--root-ca-file", filepath.Join(pki, "ca.crt"), "--service-account-private-key-file", filepath.Join(pki, "sa.key"),
		"--profiling=false")
	c.start("kube-scheduler", filepath.Join(c.bin, "kube-scheduler"),
		"--kubeconfig", c.kubeconfig, "--leader-elect=false",
		"--bind-address", "127.0.0.1", "--secure-port", strconv.Itoa(freePort(t, "127.0.0.1")), "--profiling=false")
}

func (c *cluster) writeKubeconfig() {
	c.kubeconfig = filepath.Join(c.dir, "admin.kubeconfig")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: admin
  user:
    token: %s
contexts:
- name: test
  context:
    cluster: test
    user: admin
current-context: test
`, c.apiserver, filepath.Join(c.dir, "pki", "ca.crt"), c.token)
	require.NoError(c.t, os.WriteFile(c.kubeconfig, []byte(kc), 0o600))
}

// node starts containerd (CRI) and the kubelet in a mount namespace of their
// own, with a cgroup root and CNI network of their own, imports the pause
// image and waits for the node to be Ready.
func (c *cluster) node() {
	t := c.t
	begin := time.Now()
	c.cgroups()
	c.mountNamespace()

	ctrdDir := filepath.Join(c.dir, "containerd")
	c.criSock = filepath.Join(ctrdDir, "containerd.sock")
	cniDir := filepath.Join(c.dir, "cni")
	require.NoError(t, os.MkdirAll(filepath.Join(cniDir, "net.d"), 0o755))
	conflist := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "envd-k8s-test",
  "plugins": [
    {"type": "bridge", "bridge": %q, "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": %q, "ranges": [[{"subnet": %q, "rangeStart": "10.123.0.10", "gateway": %q}]],
              "routes": [{"dst": %q}]}},
    {"type": "loopback"}
  ]
}`, bridgeName, filepath.Join(cniDir, "ipam"), podCIDR, gatewayIP, serviceCIDR)
	require.NoError(t, os.WriteFile(filepath.Join(cniDir, "net.d", "10-envd-k8s-test.conflist"), []byte(conflist), 0o644))
	cfg := fmt.Sprintf(`version = 3
root = %q
state = %q
disabled_plugins = ["io.containerd.nri.v1.nri", "io.containerd.internal.v1.opt"]

[grpc]
  address = %q

[ttrpc]
  address = %q

[plugins.'io.containerd.cri.v1.runtime']
  # This VM lacks CAP_SYS_RESOURCE: without it runc fails every sandbox
  # ("can't get final child's PID from pipe: EOF").
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = %q
    max_conf_num = 1

[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = %q

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
`, filepath.Join(ctrdDir, "root"), filepath.Join(ctrdDir, "state"), c.criSock, c.criSock+".ttrpc",
		filepath.Join(cniDir, "net.d"), pauseImage)
	require.NoError(t, os.MkdirAll(ctrdDir, 0o711))
	require.NoError(t, os.WriteFile(filepath.Join(ctrdDir, "config.toml"), []byte(cfg), 0o600))
	ctrdBin, err := exec.LookPath("containerd")
	require.NoError(t, err)
	ctrd := c.start("containerd", "nsenter", "-t", strconv.Itoa(c.holder.cmd.Process.Pid), "-m", "--",
		ctrdBin, "--config", filepath.Join(ctrdDir, "config.toml"))
	waitFor(t, "containerd (CRI)", 30*time.Second, func() error {
		if ctrd.exited() {
			return fmt.Errorf("exited: %s", ctrd.logTail())
		}
		return exec.Command("ctr", "-a", c.criSock, "version").Run()
	})

	// The pause image: busybox sleeping, built without a registry.
	pauseTar := filepath.Join(c.dir, "pause.tar")
	require.NoError(t, buildPauseImage(filepath.Join(c.dir, "pause"), pauseTar))
	c.importImage(pauseTar)

	c.startKubelet()
	waitFor(t, "node "+nodeName+" Ready", 120*time.Second, func() error {
		out, err := c.kubectl(context.Background(), "get", "node", nodeName, "-o",
			`jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		if err != nil {
			return err
		}
		if strings.TrimSpace(out) != "True" {
			return fmt.Errorf("Ready=%q", out)
		}
		return nil
	})
	c.mark("containerd + kubelet to node Ready", begin)
}

// importImage imports an image tar into the CRI namespace.
func (c *cluster) importImage(path string) {
	c.t.Helper()
	c.run("ctr", "-a", c.criSock, "-n", "k8s.io", "images", "import", path)
}

// cgroups makes the kubelet's cgroup root in every v1 hierarchy (cpuset
// needs cpus and mems before anything joins it); cleanup kills what is
// left in it and removes the tree.
func (c *cluster) cgroups() {
	t := c.t
	c.cgroupRoot = "/envd-k8s-" + randHex(4)
	hier := cgroupV1Hierarchies(t)
	for _, h := range hier {
		d := filepath.Join(h, c.cgroupRoot)
		require.NoError(t, os.Mkdir(d, 0o755), "cgroup %s", d)
		if filepath.Base(h) == "cpuset" {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				b, err := os.ReadFile(filepath.Join(h, f))
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(filepath.Join(d, f), b, 0o644))
			}
		}
	}
	c.onCleanup(func() {
		for i := 0; i < 60; i++ {
			if killCgroup(hier, c.cgroupRoot) == 0 {
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
		for _, h := range hier {
			if err := removeCgroupTree(filepath.Join(h, c.cgroupRoot)); err != nil {
				t.Errorf("cleanup: cgroup %s: %v", filepath.Join(h, c.cgroupRoot), err)
			}
		}
	})
}

// mountNamespace starts the holder of a private mount namespace, with fake
// files over the sysctls the kubelet writes and a directory of the test's
// over /var/log/containers, where the kubelet links container logs.
func (c *cluster) mountNamespace() {
	t := c.t
	fake := filepath.Join(c.dir, "fake-sysctl")
	require.NoError(t, os.MkdirAll(fake, 0o755))
	var binds []string
	// Every sysctl the kubelet's setupKernelTunables may write.
	for _, f := range []string{"/proc/sys/kernel/panic", "/proc/sys/kernel/panic_on_oops", "/proc/sys/vm/overcommit_memory",
		"/proc/sys/vm/panic_on_oom", "/proc/sys/kernel/keys/root_maxkeys", "/proc/sys/kernel/keys/root_maxbytes"} {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		p := filepath.Join(fake, strings.ReplaceAll(strings.TrimPrefix(f, "/proc/sys/"), "/", "_"))
		require.NoError(t, os.WriteFile(p, b, 0o644))
		binds = append(binds, fmt.Sprintf("mount --bind %q %q", p, f))
	}
	logLinks := filepath.Join(c.dir, "var-log-containers")
	require.NoError(t, os.MkdirAll(logLinks, 0o755))
	if _, err := os.Stat("/var/log/containers"); errors.Is(err, os.ErrNotExist) {
		require.NoError(t, os.Mkdir("/var/log/containers", 0o755))
		c.onCleanup(func() { _ = os.Remove("/var/log/containers") })
	}
	binds = append(binds, fmt.Sprintf("mount --bind %q /var/log/containers", logLinks))
	ready := filepath.Join(c.dir, "mountns.ready")
	script := strings.Join(binds, " && ") + fmt.Sprintf(" && touch %q && exec sleep 2147483647", ready)
	c.holder = c.start("mountns", "unshare", "-m", "--propagation", "private", "--", "sh", "-c", script)
	// After containerd and the kubelet are stopped: what is left in the
	// namespace (containerd's shims) is killed, so it ends with its mounts.
	c.onCleanup(func() { killMountNamespace(c.holder.cmd.Process.Pid) })
	waitFor(t, "the mount namespace", 10*time.Second, func() error {
		if c.holder.exited() {
			return fmt.Errorf("exited: %s", c.holder.logTail())
		}
		_, err := os.Stat(ready)
		return err
	})
}

func (c *cluster) startKubelet() {
	t := c.t
	kdir := filepath.Join(c.dir, "kubelet")
	require.NoError(t, os.MkdirAll(kdir, 0o755))
	cfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# The host uses cgroup v1; 1.35 and later refuse it by default.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: %q
containerRuntimeEndpoint: unix://%s
address: %q
port: %d
readOnlyPort: 0
healthzPort: 0
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
failSwapOn: false
podLogsDir: %q
resolvConf: /etc/resolv.conf
maxPods: 20
serializeImagePulls: false
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%%
  imagefs.available: 1%%
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
`, c.cgroupRoot, c.criSock, gatewayIP, freePort(t, gatewayIP), filepath.Join(kdir, "pod-logs"))
	require.NoError(t, os.WriteFile(filepath.Join(kdir, "config.yaml"), []byte(cfg), 0o600))
	c.start("kubelet", "nsenter", "-t", strconv.Itoa(c.holder.cmd.Process.Pid), "-m", "--",
		filepath.Join(c.bin, "kubelet"), "--config", filepath.Join(kdir, "config.yaml"),
		"--kubeconfig", c.kubeconfig, "--root-dir", filepath.Join(kdir, "root"), "--cert-dir", filepath.Join(kdir, "pki"),
		"--hostname-override", nodeName, "--node-ip", gatewayIP)
}

func (c *cluster) kubeProxy() {
	t := c.t
	c.start("kube-proxy", filepath.Join(c.bin, "kube-proxy"),
		"--kubeconfig", c.kubeconfig, "--hostname-override", nodeName, "--proxy-mode", "nftables",
		"--cluster-cidr", podCIDR, "--nodeport-addresses", gatewayIP+"/32",
		// 0: leave the host's conntrack sysctls alone.
		"--conntrack-max-per-core=0", "--conntrack-tcp-timeout-established=0", "--conntrack-tcp-timeout-close-wait=0",
		"--healthz-bind-address", "127.0.0.1:"+strconv.Itoa(freePort(t, "127.0.0.1")),
		"--metrics-bind-address", "127.0.0.1:"+strconv.Itoa(freePort(t, "127.0.0.1")))
	waitFor(t, "kube-proxy's nftables table", 60*time.Second, func() error {
		out, _ := exec.Command("nft", "list", "tables").CombinedOutput()
		if !strings.Contains(string(out), "table ip kube-proxy") {
			return errors.New("no table ip kube-proxy yet")
		}
		return nil
	})
}

// buildPauseImage makes the sandbox image: busybox (Debian's
// busybox-static) sleeping. containerd stops sandboxes with SIGKILL.
func buildPauseImage(dir, out string) error {
	if err := os.MkdirAll(filepath.Join(dir, "rootfs", "bin"), 0o755); err != nil {
		return err
	}
	b, err := os.ReadFile("/bin/busybox")
	if err != nil {
		return fmt.Errorf("busybox-static is not installed: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rootfs", "bin", "busybox"), b, 0o755); err != nil {
		return err
	}
	layer := filepath.Join(dir, "layer.tar.gz")
	if err := nodeimage.WriteLayer(filepath.Join(dir, "rootfs"), layer); err != nil {
		return err
	}
	return nodeimage.Write(nodeimage.Config{Ref: pauseImage, Layers: []string{layer},
		Entrypoint: []string{"/bin/busybox", "sleep", "2147483647"}}, out)
}

// cgroupV1Hierarchies are the mount points of the cgroup v1 hierarchies.
func cgroupV1Hierarchies(t *testing.T) []string {
	f, err := os.Open("/proc/self/mountinfo")
	require.NoError(t, err)
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		i := slices.Index(fields, "-")
		if i < 0 || i+1 >= len(fields) || fields[i+1] != "cgroup" {
			continue
		}
		out = append(out, fields[4])
	}
	require.NotEmpty(t, out, "no cgroup v1 hierarchy mounted")
	return out
}

// killCgroup SIGKILLs every process under root in the hierarchies and
// says how many it found.
func killCgroup(hier []string, root string) int {
	n := 0
	for _, h := range hier {
		_ = filepath.WalkDir(filepath.Join(h, root), func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
					_ = syscall.Kill(pid, syscall.SIGKILL)
					n++
				}
			}
			return nil
		})
	}
	return n
}

// removeCgroupTree removes dir's cgroups, deepest first.
func removeCgroupTree(dir string) error {
	var dirs []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	var errs []error
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := os.Remove(dirs[i]); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// listChains lists the chains of an iptables table.
func listChains(bin, table string) []string {
	out, err := exec.Command(bin, "-w", "5", "-t", table, "-S").Output()
	if err != nil {
		return nil
	}
	var chains []string
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && (f[0] == "-N" || f[0] == "-P") {
			chains = append(chains, f[1])
		}
	}
	return chains
}

// removeChains deletes, in iptables and ip6tables, the chains named in
// names or starting with one of prefixes that did not exist before the test
// (preexisting), with every rule that jumps to them.
func removeChains(t *testing.T, preexisting map[string]bool, names, prefixes []string) {
	ours := func(bin, table, ch string) bool {
		if preexisting[bin+"/"+table+"/"+ch] {
			return false
		}
		if slices.Contains(names, ch) {
			return true
		}
		for _, p := range prefixes {
			if strings.HasPrefix(ch, p) {
				return true
			}
		}
		return false
	}
	for _, bin := range []string{"iptables", "ip6tables"} {
		for _, table := range []string{"filter", "nat", "mangle", "raw"} {
			out, err := exec.Command(bin, "-w", "5", "-t", table, "-S").Output()
			if err != nil {
				continue
			}
			var del, flush []string
			for _, l := range strings.Split(string(out), "\n") {
				f := strings.Fields(l)
				if len(f) < 2 {
					continue
				}
				switch {
				case f[0] == "-N" && ours(bin, table, f[1]):
					flush = append(flush, f[1])
				case f[0] == "-A" && !ours(bin, table, f[1]):
					if j := slices.Index(f, "-j"); j > 0 && j+1 < len(f) && ours(bin, table, f[j+1]) {
						del = append(del, l)
					}
				}
			}
			for _, rule := range del {
				args := append([]string{"-w", "5", "-t", table, "-D"}, strings.Fields(rule)[1:]...)
				if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
					t.Errorf("cleanup: %s %s: %v: %s", bin, strings.Join(args, " "), err, out)
				}
			}
			for _, ch := range flush {
				_ = exec.Command(bin, "-w", "5", "-t", table, "-F", ch).Run()
			}
			for _, ch := range flush {
				if out, err := exec.Command(bin, "-w", "5", "-t", table, "-X", ch).CombinedOutput(); err != nil {
					t.Errorf("cleanup: %s -t %s -X %s: %v: %s", bin, table, ch, err, out)
				}
			}
		}
	}
}

// envdNetwork is the bridge and firewall chain prefix envd's runtime
// derives from a data dir (envd/node networkFor, runtime newFirewall).
func envdNetwork(dataDir string) (bridge, chainPrefix string) {
	sum := sha256.Sum256([]byte(dataDir))
	bridge = "envd" + hex.EncodeToString(sum[:4])
	fw := sha256.Sum256([]byte(bridge))
	return bridge, "ENVD-" + hex.EncodeToString(fw[:4]) + "-"
}

// killMountNamespace SIGKILLs every process in pid's mount namespace.
func killMountNamespace(pid int) {
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid))
	if err != nil {
		return
	}
	self, _ := os.Readlink("/proc/self/ns/mnt")
	if ns == self {
		return // never the test's own namespace
	}
	for i := 0; i < 20; i++ {
		ents, _ := os.ReadDir("/proc")
		n := 0
		for _, e := range ents {
			p, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", p)); err == nil && l == ns {
				_ = syscall.Kill(p, syscall.SIGKILL)
				n++
			}
		}
		if n == 0 {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// removeEmptyTables deletes the iptables-nft tables that were not there
// before (tablesBefore, `nft list tables`) and hold no rule now: the
// kubelet's chains create them (ip mangle, ip6 nat, ...), removing the
// chains leaves them behind.
func removeEmptyTables(tablesBefore string) {
	for _, fam := range []struct{ nft, bin string }{{"ip", "iptables"}, {"ip6", "ip6tables"}} {
		for _, table := range []string{"filter", "nat", "mangle", "raw"} {
			if strings.Contains(tablesBefore, "table "+fam.nft+" "+table+"\n") {
				continue
			}
			out, err := exec.Command(fam.bin, "-w", "5", "-t", table, "-S").Output()
			if err != nil {
				continue
			}
			empty := true
			for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
				if !strings.HasPrefix(l, "-P ") {
					empty = false
				}
			}
			if empty {
				_ = exec.Command("nft", "delete", "table", fam.nft, table).Run()
			}
		}
	}
}
