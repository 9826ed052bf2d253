package runtime

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/errdefs"
)

func TestDaemonConfig(t *testing.T) {
	var o daemonOptions
	require.NoError(t, WithProxySnapshotter("stargz", "/run/envd/stargz.sock")(&o))
	cfg := string(daemonConfig("/d", "/d/containerd.sock", o.proxyPlugins))
	for _, want := range []string{
		"version = 3\n", `root = "/d/root"`, `state = "/d/state"`,
		"[grpc]\n  address = \"/d/containerd.sock\"", `"io.containerd.grpc.v1.cri"`, `"io.containerd.nri.v1.nri"`,
		"[proxy_plugins.stargz]\n  type = \"snapshot\"\n  address = \"/run/envd/stargz.sock\"",
	} {
		assert.Contains(t, cfg, want)
	}
}

func TestDaemonOptionsValidate(t *testing.T) {
	tests := []struct {
		name string
		opt  DaemonOption
	}{
		{"empty snapshotter name", WithProxySnapshotter("", "/s.sock")},
		{"snapshotter name with quote", WithProxySnapshotter(`a"b`, "/s.sock")},
		{"relative socket", WithProxySnapshotter("stargz", "s.sock")},
		{"relative bin dir", WithBinDir("bin")},
		{"zero start timeout", WithStartTimeout(0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.ErrorIs(t, tt.opt(&daemonOptions{}), errdefs.ErrInvalidArgument)
		})
	}
}

func TestResolvConfDropsLoopbackNameservers(t *testing.T) {
	p := filepath.Join(t.TempDir(), "resolv.conf")
	require.NoError(t, os.WriteFile(p, []byte("nameserver 127.0.0.53\nnameserver 10.255.255.53\nnameserver ::1\nsearch example.org\n"), 0o644))
	got, servers, err := resolvConf(p, true)
	require.NoError(t, err)
	assert.Equal(t, "nameserver 10.255.255.53\nsearch example.org\n", got)
	assert.Equal(t, []net.IP{net.IPv4(10, 255, 255, 53).To4()}, servers)

	// Egress none: no nameserver at all.
	got, servers, err = resolvConf(p, false)
	require.NoError(t, err)
	assert.Equal(t, "search example.org\n", got)
	assert.Empty(t, servers)
}

func TestMergeEnv(t *testing.T) {
	got := mergeEnv([]string{"PATH=/bin", "A=1"}, []string{"A=2", "B=3"})
	assert.Equal(t, []string{"PATH=/bin", "A=2", "B=3"}, got)
}

func TestTranslate(t *testing.T) {
	tests := []struct {
		in   error
		kind error
	}{
		{cerrdefs.ErrNotFound, errdefs.ErrNotFound},
		{cerrdefs.ErrAlreadyExists, errdefs.ErrAlreadyExists},
		{cerrdefs.ErrFailedPrecondition, errdefs.ErrFailedPrecondition},
		{cerrdefs.ErrInvalidArgument, errdefs.ErrInvalidArgument},
		{cerrdefs.ErrUnavailable, errdefs.ErrUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.in.Error(), func(t *testing.T) {
			err := translate(fmt.Errorf("inner: %w", tt.in), "instance %q", "x")
			assert.ErrorIs(t, err, tt.kind)
			assert.ErrorIs(t, err, tt.in, "the containerd error stays in the chain")
			assert.Contains(t, err.Error(), `instance "x"`)
		})
	}
	assert.Nil(t, translate(nil, "x"))
	other := translate(errors.New("boom"), "x")
	assert.Equal(t, "internal", errdefs.Code(other))
}

func TestInstanceSpecValidate(t *testing.T) {
	dir := t.TempDir()
	ok := InstanceSpec{ID: "a-1.b_c", Image: "img", Mounts: []Mount{{Source: dir, Destination: "/workspace"}}}
	require.NoError(t, ok.validate())
	bad := map[string]InstanceSpec{
		"empty id":         {Image: "img"},
		"id with slash":    {ID: "a/b", Image: "img"},
		"no image":         {ID: "a"},
		"env without =":    {ID: "a", Image: "img", Env: []string{"FOO"}},
		"relative dest":    {ID: "a", Image: "img", Mounts: []Mount{{Source: dir, Destination: "w"}}},
		"missing source":   {ID: "a", Image: "img", Mounts: []Mount{{Source: dir + "/nope", Destination: "/w"}}},
		"hostname too odd": {ID: "a", Image: "img", Hostname: "a b"},
		"disk limit 4 KiB": {ID: "a", Image: "img", Limits: Limits{DiskBytes: 4096}},
		"negative disk":    {ID: "a", Image: "img", Limits: Limits{DiskBytes: -1}},
	}
	for name, s := range bad {
		t.Run(name, func(t *testing.T) {
			assert.ErrorIs(t, s.validate(), errdefs.ErrInvalidArgument)
		})
	}
}

func TestConflist(t *testing.T) {
	n := &network{cfg: NetworkConfig{Bridge: "envdtest", Subnet: "10.1.2.0/24", ConfDir: "/s/cni"}, name: "envd-x", gateway: []byte{10, 1, 2, 1}}
	b, err := n.conflist()
	require.NoError(t, err)
	var conf struct {
		Name    string           `json:"name"`
		Plugins []map[string]any `json:"plugins"`
	}
	require.NoError(t, json.Unmarshal(b, &conf))
	assert.Equal(t, "envd-x", conf.Name)
	// One plugin: the bridge. No CNI firewall plugin; the runtime's own
	// chains (firewall.go) decide every packet of the bridge.
	require.Len(t, conf.Plugins, 1)
	for _, p := range conf.Plugins {
		assert.NotEqual(t, "firewall", p["type"], "the CNI firewall plugin must not be in the conflist")
	}
	br := conf.Plugins[0]
	assert.Equal(t, "bridge", br["type"])
	assert.Equal(t, "envdtest", br["bridge"])
	assert.Equal(t, true, br["isGateway"])
	// Source NAT is one rule set per runtime (masquerade.go), not a
	// chain per instance made by the plugin.
	assert.Equal(t, false, br["ipMasq"])
	ipam := br["ipam"].(map[string]any)
	assert.Equal(t, "host-local", ipam["type"])
	assert.Equal(t, "/s/cni/ipam", ipam["dataDir"], "IPAM state must not be shared across runtimes")
	assert.Equal(t, []any{[]any{map[string]any{"subnet": "10.1.2.0/24", "gateway": "10.1.2.1"}}}, ipam["ranges"])
}

// An exec refused because the task is frozen is told apart from other
// failures, so callers wait for the thaw instead of failing.
func TestExecStartErr(t *testing.T) {
	paused := execStartErr(errors.New("OCI runtime exec failed: cannot exec in a paused state: unknown"), "exec in instance %q", "i")
	assert.ErrorIs(t, paused, ErrTaskPaused)
	assert.ErrorIs(t, paused, errdefs.ErrFailedPrecondition)
	assert.Contains(t, paused.Error(), `exec in instance "i"`)
	other := execStartErr(errors.New("no such file"), "exec in instance %q", "i")
	assert.NotErrorIs(t, other, ErrTaskPaused)
	assert.NotErrorIs(t, other, errdefs.ErrFailedPrecondition)
	// The init died after the exec was set up: the instance's state, so
	// the exec's caller settles it (envd/command) instead of a 500.
	stopped := execStartErr(errors.New("OCI runtime exec failed: exec failed: cannot exec in a stopped container: unknown"), "start %q in instance %q", "true", "i")
	assert.ErrorIs(t, stopped, errdefs.ErrFailedPrecondition)
	assert.NotErrorIs(t, stopped, ErrTaskPaused)
}
