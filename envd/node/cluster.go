package node

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd"
)

// clusterConfig is the service's membership settings: the node's labels,
// capacity and lease, and the command another machine runs to join it.
func (n *Node) clusterConfig(db database, reg registryPart) envd.ClusterConfig {
	return envd.ClusterConfig{Lease: n.cfg.Lease, SweepInterval: n.cfg.SweepInterval, Labels: n.cfg.Labels,
		Capacity: n.cfg.Capacity, DiskOvercommit: n.cfg.DiskOvercommit, MemoryOvercommit: n.cfg.MemoryOvercommit,
		Join: n.joinCommand(db, reg), Placement: n.cfg.Placement, Peers: n.peerFirewall(), DiskRoom: n.diskRoom(),
		JoinConfig:     func() (types.JoinConfig, error) { return n.joinConfig(db, reg) },
		TLSCertificate: func() []byte { return n.tls.certificate() }, RuntimeClasses: n.runtimeClasses()}
}

// runtimeClasses are the classes the node's runtime can run (probed
// once), recorded for placement; nil when the node has no runtime.
func (n *Node) runtimeClasses() []string {
	if n.rt == nil {
		return nil
	}
	var out []string
	for _, c := range n.rt.Classes(context.Background()) {
		out = append(out, string(c))
	}
	return out
}

// peerFirewall is the runtime, which denies the cluster's other nodes to
// instances; nil when instances run without network rules (Unrestricted).
func (n *Node) peerFirewall() envd.PeerFirewall {
	if n.rt == nil || n.cfg.Unrestricted {
		return nil
	}
	return n.rt
}

// diskRoom reports the runtime's room for new writable-layer limits to
// placement; nil when the node has no runtime.
func (n *Node) diskRoom() func() (int64, bool) {
	if n.rt == nil {
		return nil
	}
	return n.rt.DiskRoom
}

// joinConfig is what a node joining with a join token is given: the
// settings of joinCommand, with the registry credential's content instead
// of its file.
func (n *Node) joinConfig(db database, reg registryPart) (types.JoinConfig, error) {
	cfg := n.cfg
	j := types.JoinConfig{Database: db.dsn}
	if db.server != nil {
		j.Notes = append(j.Notes, "the database is a unix socket of the node's machine: only a node on that machine reaches it")
	}
	switch {
	case cfg.RegistryS3 != nil:
		s := cfg.RegistryS3
		j.RegistryS3 = &types.JoinS3{Endpoint: s.Endpoint, Bucket: s.Bucket, Region: s.Region, Secure: s.Secure, AccessKey: s.AccessKey, SecretKey: s.SecretKey}
	default:
		j.Registry = reg.addr
		if reg.files.Node != "" {
			b, err := os.ReadFile(reg.files.Node)
			if err != nil {
				return types.JoinConfig{}, fmt.Errorf("the registry credential: %w", err)
			}
			j.RegistryCredential = strings.TrimSpace(string(b))
		}
		if strings.HasPrefix(reg.addr, "127.") || strings.HasPrefix(reg.addr, "localhost") {
			j.Notes = append(j.Notes, "the registry listens on loopback: only a node on the same machine reaches it")
		}
	}
	if s := cfg.S3; s != nil {
		j.S3 = &types.JoinS3{Endpoint: s.Endpoint, Bucket: s.Bucket, Region: s.Region, Secure: s.Secure, AccessKey: s.AccessKey, SecretKey: s.SecretKey}
	}
	if cfg.Lease > 0 {
		j.Lease = cfg.Lease.String()
	}
	return j, nil
}

// joinCommand is the `envd serve` line that joins this node's database,
// registry and object storage. The S3 keys travel as environment
// variables (envd takes them from nowhere else); the database DSN holds
// its password: the answer is for admins only.
func (n *Node) joinCommand(db database, reg registryPart) types.JoinCommand {
	cfg := n.cfg
	var env, args, secrets, notes []string
	args = append(args, "envd", "serve", "--data-dir", "/var/lib/envd", "--node", "NAME", "--listen", "0.0.0.0:7777")
	args = append(args, "--database", db.dsn)
	if strings.Contains(db.dsn, "password") || strings.Contains(db.dsn, ":") && strings.Contains(db.dsn, "@") {
		secrets = append(secrets, "--database")
	}
	if db.server != nil {
		notes = append(notes, "the database is this node's private PostgreSQL on a unix socket: only a node on this machine reaches it; a cluster on several machines needs a PostgreSQL all nodes reach (envd serve --database)")
	}
	switch {
	case cfg.RegistryS3 != nil:
		// Each node serves its own embedded registry on the shared bucket.
		args = append(args, "--registry-s3-endpoint", cfg.RegistryS3.Endpoint, "--registry-s3-bucket", cfg.RegistryS3.Bucket)
		if cfg.RegistryS3.Secure {
			args = append(args, "--registry-s3-tls")
		}
		env = append(env, "ENVD_REGISTRY_S3_ACCESS_KEY="+cfg.RegistryS3.AccessKey, "ENVD_REGISTRY_S3_SECRET_KEY="+cfg.RegistryS3.SecretKey)
		secrets = append(secrets, "ENVD_REGISTRY_S3_ACCESS_KEY", "ENVD_REGISTRY_S3_SECRET_KEY")
	default:
		args = append(args, "--registry", reg.addr)
		if reg.files.Node != "" {
			args = append(args, "--registry-credential-file", reg.files.Node)
			notes = append(notes, fmt.Sprintf("copy %s (the registry credential, mode 0600) to the new machine at the same path", reg.files.Node))
		}
		if strings.HasPrefix(reg.addr, "127.") || strings.HasPrefix(reg.addr, "localhost") {
			notes = append(notes, "the registry listens on loopback: only a node on this machine reaches it; for several machines run the registry on S3 (--registry-s3-endpoint) or an external registry")
		}
	}
	if cfg.S3 != nil {
		args = append(args, "--s3-endpoint", cfg.S3.Endpoint, "--s3-bucket", cfg.S3.Bucket)
		if cfg.S3.Secure {
			args = append(args, "--s3-tls")
		}
		env = append(env, "ENVD_S3_ACCESS_KEY="+cfg.S3.AccessKey, "ENVD_S3_SECRET_KEY="+cfg.S3.SecretKey)
		secrets = append(secrets, "ENVD_S3_ACCESS_KEY", "ENVD_S3_SECRET_KEY")
	} else {
		notes = append(notes, "this node keeps volume archives in its data dir: volumes cannot follow their projects to other nodes without S3 (--s3-endpoint)")
	}
	if cfg.Lease > 0 {
		args = append(args, "--lease", cfg.Lease.String())
	}
	notes = append(notes, "replace NAME with the new node's name and the listen address with one the other nodes reach; add --label KEY=VALUE for node_selector")
	notes = append(notes, "or, without copying credentials: envctl nodes join-token prints envd serve --join URL --token T, which fetches these settings once")
	notes = append(notes, "this line logs in to the database with this node's role (the admin's on a node that made the schema): a node started with it may create API tokens; a node that joins with a join token gets a role of its own that may not (docs/deploy.md, \"What a node can do\")")
	all := append(append([]string{}, env...), args...)
	return types.JoinCommand{Command: shellJoin(all), Args: all, Secrets: secrets, Notes: notes}
}

// shellJoin quotes each word that needs it for a POSIX shell.
func shellJoin(words []string) string {
	out := make([]string, len(words))
	for i, w := range words {
		if w != "" && strings.IndexFunc(w, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=@,+%", r))
		}) < 0 {
			out[i] = w
			continue
		}
		out[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}

// ParseLabels parses KEY=VALUE labels (--label).
func ParseLabels(list []string) (map[string]string, error) {
	if len(list) == 0 {
		return nil, nil
	}
	out := map[string]string{}
	for _, l := range list {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("label %q: want KEY=VALUE", l)
		}
		out[k] = v
	}
	return out, nil
}
