package node

import (
	"fmt"

	"github.com/envd-dev/envd/registry"
	"github.com/envd-dev/envd/snapshotter/stargz"
)

// The embedded registry's credentials, generated at first start and kept in
// the data dir (0600). The node's is what a joining node is given; the GC's
// stays on the node that runs the registry and its sweep.
const (
	nodeCredentialFile = "registry-node.credential"
	gcCredentialFile   = "registry-gc.credential"
)

// registryFiles are the credential files of a node's registry; "" = none.
type registryFiles struct {
	Node, GC string
}

// registryAccess is what registryFiles hold; zero credentials are anonymous.
type registryAccess struct {
	Node, GC registry.Credential
}

// loadOrCreate generates the embedded registry's credentials when missing.
func (f registryFiles) loadOrCreate() (registry.Access, error) {
	node, err := registry.LoadOrCreateCredentialFile(f.Node, registry.NodeUser)
	if err != nil {
		return registry.Access{}, fmt.Errorf("embedded registry: %w", err)
	}
	gc, err := registry.LoadOrCreateCredentialFile(f.GC, registry.GCUser)
	if err != nil {
		return registry.Access{}, fmt.Errorf("embedded registry: %w", err)
	}
	return registry.Access{Node: node, GC: gc}, nil
}

func (f registryFiles) load() (registryAccess, error) {
	var a registryAccess
	var err error
	if f.Node != "" {
		if a.Node, err = registry.ReadCredentialFile(f.Node); err != nil {
			return a, fmt.Errorf("registry credential: %w", err)
		}
	}
	if f.GC != "" {
		if a.GC, err = registry.ReadCredentialFile(f.GC); err != nil {
			return a, fmt.Errorf("registry gc credential: %w", err)
		}
	}
	return a, nil
}

// stargzOptions give the lazy snapshotter the node credential for host.
func (a registryAccess) stargzOptions(host string) []stargz.StartOption {
	if a.Node.IsZero() {
		return nil
	}
	return []stargz.StartOption{stargz.WithRegistryCredential(host, a.Node)}
}

// nodeFor answers containerd's authorizer: the node credential for host,
// anonymous for any other registry.
func (a registryAccess) nodeFor(host string) func(string) (string, string, error) {
	if a.Node.IsZero() {
		return nil
	}
	return func(h string) (string, string, error) {
		if h != host {
			return "", "", nil
		}
		return a.Node.User, a.Node.Password, nil
	}
}
