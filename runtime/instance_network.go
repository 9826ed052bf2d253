package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/envd-dev/envd/errdefs"
)

// networkPolicyFile keeps an instance's NetworkPolicy in its instance dir,
// so a Start (of a stopped instance, or by a restarted envd) applies the
// same policy.
const networkPolicyFile = "network.json"

type policyRecord struct {
	Group    string `json:"group"`
	Isolated bool   `json:"isolated,omitempty"`
	Egress   string `json:"egress"`
}

func (r *Runtime) saveNetworkPolicy(id string, pol NetworkPolicy) error {
	b, _ := json.Marshal(policyRecord{Group: pol.Group, Isolated: pol.Isolated, Egress: pol.Egress.String()})
	if err := os.WriteFile(filepath.Join(r.instanceDir(id), networkPolicyFile), b, 0o600); err != nil {
		return fmt.Errorf("network policy of %q: %w", id, err)
	}
	return nil
}

// loadNetworkPolicy reads the policy Create or SetNetworkPolicy recorded.
// An instance made before policies existed has none: it gets a group of its
// own and open egress.
func (r *Runtime) loadNetworkPolicy(id string) (NetworkPolicy, error) {
	b, err := os.ReadFile(filepath.Join(r.instanceDir(id), networkPolicyFile))
	if errors.Is(err, os.ErrNotExist) {
		return NetworkPolicy{Egress: Egress{Mode: EgressOpen}}, nil
	}
	if err != nil {
		return NetworkPolicy{}, fmt.Errorf("network policy of %q: %w", id, err)
	}
	var rec policyRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return NetworkPolicy{}, fmt.Errorf("network policy of %q: %v: %w", id, err, errdefs.ErrInvalidArgument)
	}
	eg, err := ParseEgress(rec.Egress)
	if err != nil {
		return NetworkPolicy{}, fmt.Errorf("network policy of %q: %w", id, err)
	}
	return NetworkPolicy{Group: rec.Group, Isolated: rec.Isolated, Egress: eg}, nil
}

// SetNetworkPolicy replaces an instance's network policy. It applies at
// once to a running (or paused) instance; connections already open are not cut. A stopped
// instance gets it at its next Start.
func (r *Runtime) SetNetworkPolicy(ctx context.Context, id string, pol NetworkPolicy) error {
	if err := pol.validate(); err != nil {
		return err
	}
	ctx = r.ctx(ctx)
	if _, err := r.client.LoadContainer(ctx, id); err != nil {
		return translate(err, "instance %q", id)
	}
	if err := r.saveNetworkPolicy(id, pol); err != nil {
		return err
	}
	ip := r.net.fw.attached(id)
	if ip == nil {
		return nil // not attached: the next Start applies it
	}
	resolv, nameservers, err := r.instanceResolv(pol)
	if err != nil {
		return err
	}
	if err := r.net.setPolicy(ctx, id, ip, pol, nameservers); err != nil {
		return err
	}
	// The DNS servers follow the policy too (none has none).
	if err := os.WriteFile(filepath.Join(r.instanceDir(id), "resolv.conf"), []byte(resolv), 0o644); err != nil {
		return fmt.Errorf("instance file resolv.conf of %q: %w", id, err)
	}
	return nil
}
