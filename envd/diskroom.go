package envd

import "context"

// reportDiskRoom records the node's room for new writable-layer limits
// (ClusterConfig.DiskRoom) for placement.
func (s *Service) reportDiskRoom(ctx context.Context) {
	f := s.cfg.Cluster.DiskRoom
	if f == nil {
		return
	}
	room, ok := f()
	if !ok {
		return
	}
	if err := s.store.Nodes.SetNodeDiskRoom(ctx, s.cfg.Node, room); err != nil {
		s.log.Warn("report the node's disk room", "err", err)
	}
}
