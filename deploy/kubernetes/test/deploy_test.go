// Package k8stest deploys envd's Kubernetes manifests (deploy/kubernetes)
// onto a real single-node Kubernetes built on this machine
// (scripts/k8s-build.sh) and uses envd through its Service. Root only; it
// cleans up every process, mount, cgroup, bridge and iptables chain it made.
package k8stest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/internal/pgserver"
)

// repoRoot is the module's root (the test runs in its package directory).
func repoRoot(t *testing.T) string {
	root, err := filepath.Abs("../../..")
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(root, "go.mod"))
	require.NoError(t, err)
	return root
}

// TestRootKubernetesDeploy brings up Kubernetes, imports the node image
// scripts/build-node-image.sh builds, applies the single-node overlay
// (with the test's PostgreSQL, S3, credentials and certificate on top), and
// then, through the envd Service only: imports a base image, creates a
// project, restores an instance, writes a file, saves, restores the saved
// version and reads the file; deletes the envd node pod, sees the instance
// it ran settle as Failed, the DaemonSet start a new pod, and the project's
// current version restore on it with the file.
func TestRootKubernetesDeploy(t *testing.T) {
	require.Equal(t, 0, os.Geteuid(), "TestRootKubernetesDeploy needs root (containerd, kubelet, mounts, iptables)")
	root := repoRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()

	dir, err := os.MkdirTemp("", "envd-k8s-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755)) // PostgreSQL runs as its own user below it
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("cleanup: remove %s: %v", dir, err)
		}
	})
	// The envd node's data dir, the same path on the host and in the pod, so
	// the instances' bridge and firewall chains envd names after it are the
	// test's own; removed after the cluster (registered first, runs last).
	dataDir := filepath.Join(dir, "envd-data")
	envdBridge, envdChains := envdNetwork(dataDir)
	t.Cleanup(func() {
		removeChains(t, nil, nil, []string{envdChains})
		if _, err := net.InterfaceByName(envdBridge); err == nil {
			if out, err := exec.Command("ip", "link", "del", envdBridge).CombinedOutput(); err != nil {
				t.Errorf("cleanup: ip link del %s: %v: %s", envdBridge, err, out)
			}
		}
	})

	// The node image, built while the cluster comes up.
	imageTar := filepath.Join(dir, "envd-node.tar")
	imageDone := make(chan error, 1)
	go func() {
		begin := time.Now()
		cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "scripts", "build-node-image.sh"), imageTar)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			err = fmt.Errorf("build-node-image.sh: %w: %s", err, out)
		} else {
			t.Logf("node image built in %.1f s: %s", time.Since(begin).Seconds(), strings.TrimSpace(lastLine(string(out))))
		}
		imageDone <- err
	}()

	// PostgreSQL, external to the cluster: pods reach it through its socket
	// directory (a hostPath).
	pg, err := pgserver.Start(ctx, filepath.Join(dir, "pg"), pgserver.WithNoSync())
	require.NoError(t, err)
	t.Cleanup(func() { _ = pg.Stop(context.Background()) })

	begin := time.Now()
	c := startCluster(t, dir)

	// S3 (versitygw) on the node's bridge address: the registry pod stores
	// there and nodes follow its presigned redirects there.
	s3Addr, s3Key, s3Secret := startS3(t, c, filepath.Join(dir, "s3"))

	require.NoError(t, <-imageDone)
	imported := time.Now()
	c.importImage(imageTar)
	c.mark("node image import", imported)

	kdir := writeTestKustomization(t, c, root, dir, dataDir, pg.SocketDir(), s3Addr, s3Key, s3Secret)
	applied := time.Now()
	c.mustKubectl(ctx, "apply", "-k", kdir)
	t.Cleanup(func() {
		// envd's pods first, gracefully (they stop their containerd and
		// instances), while the cluster still runs.
		dctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if out, err := c.kubectl(dctx, "delete", "-k", kdir, "--wait=true", "--timeout=150s", "--ignore-not-found"); err != nil {
			t.Logf("cleanup: %v: %s", err, out)
		}
	})
	defer func() {
		if t.Failed() {
			dumpState(t, c, dataDir)
		}
	}()
	rollout(t, c, ctx, "deployment/envd-registry")
	rollout(t, c, ctx, "daemonset/envd-node")
	c.mark("manifests applied to envd ready", applied)
	t.Logf("bring-up in all: %.1f s (%s)", time.Since(begin).Seconds(), strings.Join(c.timings, "; "))

	// From here on, only the envd Service.
	tokenBytes, err := os.ReadFile(filepath.Join(dataDir, "admin.token"))
	require.NoError(t, err)
	ec, err := client.New("https://"+net.JoinHostPort(envdServiceIP, "7443"), strings.TrimSpace(string(tokenBytes)), client.WithCACert(c.ca.pem))
	require.NoError(t, err)
	waitFor(t, "envd through its Service", 60*time.Second, func() error { return ec.Healthz(ctx) })

	base := filepath.Join(dir, "busybox")
	out, err := exec.Command("bash", filepath.Join(root, "scripts", "busybox-rootfs.sh"), base).CombinedOutput()
	require.NoError(t, err, "%s", out)
	tarball, err := exec.Command("tar", "--numeric-owner", "-C", base, "-cf", "-", ".").Output()
	require.NoError(t, err)
	_, err = ec.ImportImage(ctx, "busybox", bytes.NewReader(tarball))
	require.NoError(t, err)
	_, err = ec.CreateProject(ctx, types.CreateProjectRequest{Name: "k8s-demo", Base: "busybox"})
	require.NoError(t, err)

	first, err := ec.CreateInstance(ctx, "k8s-demo", types.CreateInstanceRequest{})
	require.NoError(t, err)
	require.Equal(t, types.StateRunning, first.State)
	assert.Equal(t, nodeName, first.Node, "the envd node is named after its Kubernetes node")
	mustExec(t, ec, first.ID, "echo 'written in kubernetes' > /root/note")
	op, err := ec.Save(ctx, first.ID, types.SaveRequest{Message: "a note"}, "")
	require.NoError(t, err)
	op, err = ec.WaitOperation(ctx, op.ID, nil)
	require.NoError(t, err)
	require.Equalf(t, types.OpSucceeded, op.State, "save: %+v", op.Error)
	var saved types.SaveResult
	require.NoError(t, json.Unmarshal(op.Result, &saved))
	require.True(t, saved.Current)
	_, err = ec.DeleteInstance(ctx, first.ID)
	require.NoError(t, err)

	second, err := ec.CreateInstance(ctx, "k8s-demo", types.CreateInstanceRequest{Version: saved.Version})
	require.NoError(t, err)
	assert.Equal(t, "written in kubernetes\n", mustExec(t, ec, second.ID, "cat /root/note"))

	// The node pod goes; the DaemonSet makes a new one on the same data dir.
	oldPod := strings.TrimSpace(c.mustKubectl(ctx, "-n", "envd", "get", "pod", "-l", "app.kubernetes.io/name=envd-node",
		"-o", "jsonpath={.items[*].metadata.uid}"))
	require.NotEmpty(t, oldPod)
	deleted := time.Now()
	c.mustKubectl(ctx, "-n", "envd", "delete", "pod", "-l", "app.kubernetes.io/name=envd-node", "--wait=true", "--timeout=150s")
	waitFor(t, "a new envd node pod", 3*time.Minute, func() error {
		uid, err := c.kubectl(ctx, "-n", "envd", "get", "pod", "-l", "app.kubernetes.io/name=envd-node",
			"-o", `jsonpath={range .items[*]}{.metadata.uid} {.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}`)
		if err != nil {
			return err
		}
		f := strings.Fields(uid)
		if len(f) != 2 || f[0] == oldPod || f[1] != "True" {
			return fmt.Errorf("pods: %q", uid)
		}
		return nil
	})
	c.mark("node pod deleted to its successor Ready", deleted)
	waitFor(t, "envd through its Service after the pod's replacement", 60*time.Second, func() error { return ec.Healthz(ctx) })

	// The instance the old pod ran is gone with it: it settles as Failed.
	waitFor(t, "the old pod's instance to settle", 2*time.Minute, func() error {
		in, err := ec.GetInstance(ctx, second.ID)
		if err != nil {
			return err
		}
		if in.State != types.StateFailed {
			return fmt.Errorf("state %s (%s)", in.State, in.Reason)
		}
		t.Logf("the old pod's instance: %s, reason %q", in.State, in.Reason)
		return nil
	})

	third, err := ec.CreateInstance(ctx, "k8s-demo", types.CreateInstanceRequest{})
	require.NoError(t, err)
	require.Equal(t, types.StateRunning, third.State)
	assert.Equal(t, "written in kubernetes\n", mustExec(t, ec, third.ID, "cat /root/note"))
	_, err = ec.DeleteInstance(ctx, third.ID)
	require.NoError(t, err)
}

func mustExec(t *testing.T, ec *client.Client, id, script string) string {
	t.Helper()
	res, err := ec.Exec(context.Background(), id, types.ExecRequest{Args: []string{"/bin/sh", "-c", script}})
	require.NoError(t, err)
	require.Equalf(t, 0, res.ExitCode, "%s: %s", script, res.Stderr)
	return res.Stdout
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// rollout waits until a workload of the envd namespace is rolled out.
func rollout(t *testing.T, c *cluster, ctx context.Context, what string) {
	t.Helper()
	_, err := c.kubectl(ctx, "-n", "envd", "rollout", "status", what, "--timeout=5m")
	require.NoError(t, err)
}

// s3Host names S3 in the pods (hostAliases): the bridge's address.
const s3Host = "s3.envd-k8s-test"

// startS3 runs versitygw on the bridge's address; cleanup stops it.
func startS3(t *testing.T, c *cluster, dir string) (addr, key, secret string) {
	t.Helper()
	bin, err := exec.LookPath("versitygw")
	require.NoError(t, err, "versitygw is not on PATH (scripts/setup.sh installs it)")
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "data"), 0o700))
	addr = net.JoinHostPort(gatewayIP, fmt.Sprint(freePort(t, gatewayIP)))
	key, secret = "k"+randHex(8), randHex(16)
	p := c.start("versitygw", "env", "ROOT_ACCESS_KEY="+key, "ROOT_SECRET_KEY="+secret,
		bin, "--port", addr, "--quiet", "posix", filepath.Join(dir, "data"))
	waitFor(t, "versitygw", 30*time.Second, func() error {
		if p.exited() {
			return fmt.Errorf("exited: %s", p.logTail())
		}
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return err
		}
		return conn.Close()
	})
	return addr, key, secret
}

// writeTestKustomization writes the test's layer over the single-node
// overlay: the Secrets' values, the S3 endpoint, the data dir's host path
// and PostgreSQL's socket directory. It returns its directory.
func writeTestKustomization(t *testing.T, c *cluster, root, dir, dataDir, pgSocketDir, s3Addr, s3Key, s3Secret string) string {
	t.Helper()
	kdir := filepath.Join(dir, "kustomize")
	require.NoError(t, os.MkdirAll(kdir, 0o700))
	crt, key, err := c.ca.serving("envd", []string{"envd", "envd.envd", "envd.envd.svc", "envd.envd.svc.cluster.local"},
		[]net.IP{net.ParseIP(envdServiceIP), net.ParseIP(gatewayIP)})
	require.NoError(t, err)
	dsn := fmt.Sprintf("host=%s dbname=%s user=postgres sslmode=disable", pgSocketDir, pgserver.DatabaseName)
	indent := func(b []byte) string {
		return "    " + strings.ReplaceAll(strings.TrimSpace(string(b)), "\n", "\n    ")
	}
	secrets := fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata:
  name: envd
stringData:
  ENVD_DATABASE_URL: %q
  ENVD_S3_ACCESS_KEY: %q
  ENVD_S3_SECRET_KEY: %q
  ENVD_REGISTRY_S3_ACCESS_KEY: %q
  ENVD_REGISTRY_S3_SECRET_KEY: %q
---
apiVersion: v1
kind: Secret
metadata:
  name: envd-registry-credentials
stringData:
  node.credential: "node:%s"
  gc.credential: "gc:%s"
---
apiVersion: v1
kind: Secret
metadata:
  name: envd-tls
stringData:
  tls.crt: |
%s
  tls.key: |
%s
`, dsn, s3Key, s3Secret, s3Key, s3Secret, randHex(16), randHex(16), indent(crt), indent(key))
	require.NoError(t, os.WriteFile(filepath.Join(kdir, "secrets.yaml"), []byte(secrets), 0o600))
	_, s3Port, err := net.SplitHostPort(s3Addr)
	require.NoError(t, err)
	s3Endpoint := net.JoinHostPort(s3Host, s3Port)
	// kustomize takes a base only by a relative path.
	overlay, err := filepath.Rel(kdir, filepath.Join(root, "deploy", "kubernetes", "overlays", "single-node"))
	require.NoError(t, err)
	kust := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - %s
configMapGenerator:
  - name: envd-config
    namespace: envd
    behavior: merge
    literals:
      - ENVD_S3_ENDPOINT=%s
      - ENVD_REGISTRY_S3_ENDPOINT=%s
patches:
  - path: secrets.yaml
  # S3 by name, as in a cluster with DNS: envd's registry client refuses a
  # redirect from the registry to another host given as a private IP.
  - target:
      kind: Deployment
      name: envd-registry
    patch: |-
      - op: add
        path: /spec/template/spec/hostAliases
        value: [{ip: %q, hostnames: [%q]}]
  - target:
      kind: DaemonSet
      name: envd-node
    patch: |-
      - op: test
        path: /spec/template/spec/containers/0/env/1/name
        value: ENVD_DATA_DIR
      - op: replace
        path: /spec/template/spec/containers/0/env/1/value
        value: %s
      - op: test
        path: /spec/template/spec/containers/0/volumeMounts/0/name
        value: data
      - op: replace
        path: /spec/template/spec/containers/0/volumeMounts/0/mountPath
        value: %s
      - op: test
        path: /spec/template/spec/volumes/0/name
        value: data
      - op: replace
        path: /spec/template/spec/volumes/0/hostPath/path
        value: %s
      - op: add
        path: /spec/template/spec/containers/0/volumeMounts/-
        value: {name: postgresql, mountPath: %s}
      - op: add
        path: /spec/template/spec/volumes/-
        value: {name: postgresql, hostPath: {path: %s, type: Directory}}
      - op: add
        path: /spec/template/spec/hostAliases
        value: [{ip: %q, hostnames: [%q]}]
`, overlay, s3Endpoint, s3Endpoint, gatewayIP, s3Host,
		dataDir, dataDir, dataDir, pgSocketDir, pgSocketDir, gatewayIP, s3Host)
	require.NoError(t, os.WriteFile(filepath.Join(kdir, "kustomization.yaml"), []byte(kust), 0o600))
	return kdir
}

// dumpState logs what a failed run needs: pods, events, the node's logs.
func dumpState(t *testing.T, c *cluster, dataDir string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, args := range [][]string{
		{"get", "nodes,pods,svc,endpointslices", "-A", "-o", "wide"},
		{"-n", "envd", "describe", "pods"},
		{"get", "events", "-A", "--sort-by=.lastTimestamp"},
		{"-n", "envd", "logs", "-l", "app.kubernetes.io/name=envd-node", "--tail=80", "--all-containers"},
		{"-n", "envd", "logs", "-l", "app.kubernetes.io/name=envd-registry", "--tail=40"},
	} {
		out, _ := c.kubectl(ctx, args...)
		t.Logf("kubectl %s:\n%s", strings.Join(args, " "), out)
	}
	for _, f := range []string{"containerd/containerd.log", "stargz/snapshotter.log"} {
		if b, err := os.ReadFile(filepath.Join(dataDir, f)); err == nil {
			if len(b) > 3000 {
				b = b[len(b)-3000:]
			}
			t.Logf("%s:\n%s", f, b)
		}
	}
	for _, p := range []string{"kubelet", "containerd"} {
		if b, err := os.ReadFile(filepath.Join(c.dir, "logs", p+".log")); err == nil {
			if len(b) > 4000 {
				b = b[len(b)-4000:]
			}
			t.Logf("%s log:\n%s", p, b)
		}
	}
}
