package apitest

import (
	"context"

	"github.com/envd-dev/envd/api/types"
)

// SSHKeys is the fake SSHKeyCore.
type SSHKeys struct{ *Recorder }

// AddSSHKey answers the key as given, id 1, named req.Name.
func (c *SSHKeys) AddSSHKey(ctx context.Context, p types.Principal, req types.AddSSHKeyRequest) (types.SSHKey, error) {
	return echo(c, "AddSSHKey", p, types.SSHKey{ID: 1, Name: req.Name, Fingerprint: "SHA256:test", PublicKey: req.PublicKey, CreatedAt: Epoch}, req)
}

// ListSSHKeys answers no keys.
func (c *SSHKeys) ListSSHKeys(ctx context.Context, p types.Principal) ([]types.SSHKey, error) {
	return echo(c, "ListSSHKeys", p, []types.SSHKey{})
}

// DeleteSSHKey answers key id.
func (c *SSHKeys) DeleteSSHKey(ctx context.Context, p types.Principal, id int64) (types.SSHKey, error) {
	return echo(c, "DeleteSSHKey", p, types.SSHKey{ID: id, Name: "k", Fingerprint: "SHA256:test", CreatedAt: Epoch}, id)
}
