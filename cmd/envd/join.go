package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/envd/node"
	"github.com/envd-dev/envd/internal/objstore"
	"github.com/envd-dev/envd/registry"
)

// joinFlags are `envd serve --join URL --token T`: the node fetches the
// cluster's database, registry and S3 settings from a node with a join
// token (envctl nodes join-token) instead of taking them by flag.
type joinFlags struct {
	url, token, ca string
}

// joinFile keeps what a join fetched (0600 in the data dir): a token is
// used once, so a restart with the same --join reads it from here.
const joinFile = "join.json"

func (j *joinFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&j.url, "join", env("ENVD_JOIN", ""), "join the cluster of the node at this API URL: fetch its database, registry and S3 settings with --token instead of --database, --registry, --s3-*; kept in DATA_DIR/join.json for restarts (ENVD_JOIN)")
	fl.StringVar(&j.token, "token", env("ENVD_JOIN_TOKEN", ""), "join token of --join, from envctl nodes join-token; used once (ENVD_JOIN_TOKEN)")
	fl.StringVar(&j.ca, "join-ca", env("ENVD_JOIN_CA", ""), "PEM CA certificate of --join's node when it serves a self-signed or private certificate (ENVD_JOIN_CA)")
}

// apply fills cfg's database, registry, S3 and lease from the cluster
// (or from DATA_DIR/join.json when this data dir joined before). The flags
// that --join replaces must not be given too; an explicit --lease wins.
func (j *joinFlags) apply(cfg *node.Config, fs *pflag.FlagSet) error {
	if j.url == "" {
		if j.token != "" {
			return errors.New("--token is the join token of --join URL")
		}
		return nil
	}
	for _, name := range []string{"database", "registry", "registry-credential-file", "registry-s3-endpoint", "s3-endpoint"} {
		if fs != nil && fs.Changed(name) {
			return fmt.Errorf("--join fetches the cluster's settings: do not give --%s too", name)
		}
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return err
	}
	saved := filepath.Join(cfg.DataDir, joinFile)
	var jc types.JoinConfig
	b, err := os.ReadFile(saved)
	switch {
	case err == nil:
		if err := json.Unmarshal(b, &jc); err != nil {
			return fmt.Errorf("%s: %w", saved, err)
		}
	case errors.Is(err, os.ErrNotExist):
		if j.token == "" {
			return errors.New("--join needs --token (envctl nodes join-token makes one)")
		}
		if jc, err = j.fetch(cfg); err != nil {
			return err
		}
		b, _ := json.Marshal(jc)
		if err := writeFileAtomic(saved, b, 0o600); err != nil {
			return err
		}
	default:
		return err
	}
	return applyJoinConfig(cfg, jc, fs == nil || !fs.Changed("lease"))
}

func (j *joinFlags) fetch(cfg *node.Config) (types.JoinConfig, error) {
	var opts []client.Option
	if j.ca != "" {
		pem, err := os.ReadFile(j.ca)
		if err != nil {
			return types.JoinConfig{}, fmt.Errorf("--join-ca: %w", err)
		}
		opts = append(opts, client.WithCACert(pem))
	}
	c, err := client.New(j.url, j.token, opts...)
	if err != nil {
		return types.JoinConfig{}, fmt.Errorf("--join %s: %w", j.url, err)
	}
	name := cfg.Node
	if name == "" {
		name, _ = os.Hostname()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	jc, err := c.Join(ctx, types.JoinRequest{Node: name})
	if err != nil {
		return types.JoinConfig{}, fmt.Errorf("join the cluster of %s: %w", j.url, err)
	}
	return jc, nil
}

func applyJoinConfig(cfg *node.Config, jc types.JoinConfig, lease bool) error {
	if jc.Database == "" {
		return errors.New("the cluster's answer has no database")
	}
	cfg.DSN = jc.Database
	switch {
	case jc.RegistryS3 != nil:
		s := jc.RegistryS3
		cfg.RegistryS3 = &registry.S3Storage{Endpoint: s.Endpoint, Bucket: s.Bucket, Region: s.Region, Secure: s.Secure, AccessKey: s.AccessKey, SecretKey: s.SecretKey}
	case jc.Registry != "":
		cfg.Registry = jc.Registry
		if jc.RegistryCredential != "" {
			f := filepath.Join(cfg.DataDir, "join-registry.credential")
			if err := writeFileAtomic(f, []byte(jc.RegistryCredential+"\n"), 0o600); err != nil {
				return err
			}
			cfg.RegistryCredentialFile = f
		}
	}
	if s := jc.S3; s != nil {
		cfg.S3 = &objstore.S3Config{Endpoint: s.Endpoint, Bucket: s.Bucket, Region: s.Region, Secure: s.Secure, AccessKey: s.AccessKey, SecretKey: s.SecretKey}
	}
	if lease && jc.Lease != "" {
		d, err := time.ParseDuration(jc.Lease)
		if err != nil {
			return fmt.Errorf("the cluster's lease %q: %w", jc.Lease, err)
		}
		cfg.Lease = d
	}
	return nil
}

// writeFileAtomic writes a file through a temporary one and a rename.
func writeFileAtomic(path string, b []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
