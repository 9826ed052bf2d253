package runtime

import (
	"context"
	"strings"
)

// pulled reports whether ref can be started without asking the registry:
// it names its manifest by digest (so its content cannot have changed), is
// in containerd, and is unpacked for the snapshotter it was pulled for,
// which this runtime still uses for it. A start of a version cached on the
// node then costs no registry round trip (and works while the registry is
// unreachable).
func (r *Runtime) pulled(ctx context.Context, ref string) bool {
	if !strings.Contains(ref, "@sha256:") {
		return false
	}
	img, err := r.client.GetImage(ctx, ref)
	if err != nil {
		return false
	}
	sn := img.Labels()[LabelSnapshotter]
	switch {
	case sn == snapshotter:
	case sn != "" && sn == r.cfg.LazySnapshotter && !r.cfg.UserNS:
	default:
		// Unlabelled, or pulled lazily for a snapshotter no longer in use
		// (or one user namespaces rule out): Pull chooses again.
		return false
	}
	ok, err := img.IsUnpacked(ctx, sn)
	return err == nil && ok
}
