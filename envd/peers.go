package envd

import (
	"context"
	"net/url"
	"slices"
)

// PeerFirewall keeps instances away from the cluster's other nodes
// (runtime.Runtime.SetPeerNodes): hosts are their API URLs' hosts, IPs or
// names; each call replaces the previous list.
type PeerFirewall interface {
	SetPeerNodes(ctx context.Context, hosts []string) error
}

// denyPeers gives the node's firewall the hosts of every other node in the
// node table, lost and stopped ones too (they may come back): their API,
// SSH endpoint and whatever else they serve is unreachable from this
// node's instances. A node removed from the table is dropped from the
// list. Called at join and every sweep interval.
func (s *Service) denyPeers(ctx context.Context) {
	fw := s.cfg.Cluster.Peers
	if fw == nil {
		return
	}
	members, err := s.store.Nodes.ListMembers(ctx)
	if err != nil {
		s.log.Warn("list the cluster's nodes for the instance firewall", "err", err)
		return
	}
	var hosts []string
	for _, m := range members {
		if m.Name == s.cfg.Node {
			continue
		}
		if u, err := url.Parse(m.APIURL); err == nil && u.Hostname() != "" && !slices.Contains(hosts, u.Hostname()) {
			hosts = append(hosts, u.Hostname())
		}
	}
	if err := fw.SetPeerNodes(ctx, hosts); err != nil {
		s.log.Warn("deny the cluster's other nodes to instances", "err", err)
	}
}
