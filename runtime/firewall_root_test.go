package runtime

import (
	"crypto/rand"
	"encoding/hex"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRootFirewallConcurrentRuntimes: runtimes that set up and tear down
// their rules at the same time (envd nodes and test processes on one
// machine) remove exactly their own jumps and chains, in iptables and
// ip6tables, and never another runtime's.
func TestRootFirewallConcurrentRuntimes(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	mk := func() *firewall {
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		f, err := newFirewall("envdfw"+hex.EncodeToString(b), t.TempDir(), nil, nil)
		require.NoError(t, err)
		t.Cleanup(f.destroy)
		return f
	}
	keep, churn := mk(), []*firewall{mk(), mk()}
	require.NoError(t, keep.ensureBase())

	var wg sync.WaitGroup
	errs := make(chan error, len(churn))
	for _, f := range churn {
		wg.Go(func() {
			for range 25 {
				if err := f.ensureBase(); err != nil {
					errs <- err
					return
				}
				f.destroy()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	bins := []string{"iptables"}
	if keep.ipv6 {
		bins = append(bins, "ip6tables")
	}
	for _, bin := range bins {
		out, err := exec.Command(bin, "-w", "5", "-S").Output()
		require.NoError(t, err)
		rules := string(out)
		for _, want := range []string{
			"-A INPUT -i " + keep.bridge + " -j " + keep.chain("IN"),
			"-A FORWARD -i " + keep.bridge + " -j " + keep.chain("FW"),
			"-A FORWARD -o " + keep.bridge + " -j " + keep.chain("FW"),
		} {
			assert.Equal(t, 1, strings.Count(rules, want+"\n"), "%s: %q of the runtime that stayed", bin, want)
		}
		for _, f := range churn {
			assert.NotContains(t, rules, f.prefix, "%s: rules of a destroyed runtime left", bin)
		}
	}
	keep.destroy()
	for _, bin := range bins {
		out, err := exec.Command(bin, "-w", "5", "-S").Output()
		require.NoError(t, err)
		assert.NotContains(t, string(out), keep.prefix, "%s: rules left after destroy", bin)
	}
}
