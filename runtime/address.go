package runtime

import (
	"os"
	"path/filepath"
	"strings"
)

// Address is the instance's IP address on the bridge, as Status reports it,
// read from the instance's files alone: no containerd call, so a list of
// many instances costs no round trip per instance. "" for an unknown
// instance or one never attached.
func (r *Runtime) Address(id string) string {
	if !validID.MatchString(id) {
		return ""
	}
	b, err := os.ReadFile(filepath.Join(r.instanceDir(id), "address"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
