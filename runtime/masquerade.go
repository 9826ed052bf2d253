package runtime

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
)

// Source NAT of the instances' outbound traffic.
//
// One rule set per runtime, made when the network is, rather than the CNI
// bridge plugin's ipMasq, which adds and deletes a nat chain of its own per
// instance (several iptables runs on every start and every removal, the
// largest part of CNI's time there). The chain PREFIX-NAT holds: traffic
// to the subnet itself returns unchanged; multicast is left alone;
// everything else leaving it is masqueraded. POSTROUTING jumps to it for
// the subnet's sources. What reaches where is the firewall's business
// (filter table), not this one's.

// natChain is the runtime's nat chain.
func (n *network) natChain() string { return n.fw.chain("NAT") }

// ensureMasquerade (re)builds the nat chain and adds the jump from
// POSTROUTING once. Idempotent.
func (n *network) ensureMasquerade() error {
	defer hostLock()()
	c := n.natChain()
	script := strings.Join([]string{"*nat",
		":" + c + " - [0:0]",
		"-A " + c + " -d " + n.cfg.Subnet + " -j RETURN",
		"-A " + c + " -d 224.0.0.0/4 -j RETURN",
		"-A " + c + " -j MASQUERADE",
		"COMMIT", ""}, "\n")
	cmd := exec.Command("iptables-restore", "-w", "5", "--noflush")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("iptables-restore (nat): %v: %s", err, bytes.TrimSpace(out))
	}
	jump := func(op string) []string {
		return []string{"-t", "nat", op, "POSTROUTING", "-s", n.cfg.Subnet, "-j", c}
	}
	if ipt("iptables", jump("-C")...) == nil {
		return nil
	}
	return ipt("iptables", jump("-A")...)
}

// removeMasquerade deletes the jump and the chain. Idempotent.
func (n *network) removeMasquerade() {
	defer hostLock()()
	c := n.natChain()
	for ipt("iptables", "-t", "nat", "-D", "POSTROUTING", "-s", n.cfg.Subnet, "-j", c) == nil {
	}
	_ = ipt("iptables", "-t", "nat", "-F", c)
	_ = ipt("iptables", "-t", "nat", "-X", c)
}
