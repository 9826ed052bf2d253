package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/internal/objstore"
	"github.com/envd-dev/envd/internal/s3test"
	"github.com/envd-dev/envd/registry"
)

// startRegistryCmd runs `envd registry ARGS` until the test ends and
// returns its address once it accepts connections.
func startRegistryCmd(t *testing.T, env map[string]string, args ...string) (string, <-chan error) {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	cmd := registryCmd()
	cmd.SetArgs(append([]string{"--listen", addr}, args...))
	ctx, cancel := context.WithCancel(context.Background())
	done, finished := make(chan error, 1), make(chan struct{})
	go func() { done <- cmd.ExecuteContext(ctx); close(finished) }()
	t.Cleanup(func() { cancel(); <-finished })
	for i := 0; i < 100; i++ {
		if c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond); err == nil {
			c.Close()
			return addr, done
		}
		select {
		case err := <-done:
			done <- err
			return addr, done
		case <-time.After(100 * time.Millisecond):
		}
	}
	require.FailNow(t, "envd registry did not start")
	return "", nil
}

// `envd registry` serves envd's registry alone: the node credential pulls
// and pushes, others are refused, content lands in S3.
func TestRegistryCommandS3(t *testing.T) {
	s3 := s3test.Start(t)
	s3.Bucket = "envd-registry-cmd"
	dir := t.TempDir()
	addr, done := startRegistryCmd(t, map[string]string{
		"ENVD_REGISTRY_S3_ACCESS_KEY": s3.AccessKey, "ENVD_REGISTRY_S3_SECRET_KEY": s3.SecretKey,
	}, "--data-dir", dir, "--s3-endpoint", s3.Endpoint, "--s3-bucket", s3.Bucket)
	select {
	case err := <-done:
		require.FailNow(t, "envd registry exited", "%v", err)
	default:
	}
	node, err := registry.ReadCredentialFile(filepath.Join(dir, "registry-node.credential"))
	require.NoError(t, err, "the node credential is generated when missing")
	ctx := context.Background()

	c, err := registry.NewClient(addr, registry.WithCredential(node))
	require.NoError(t, err)
	require.NoError(t, c.Ping(ctx))
	bad, err := registry.NewClient(addr, registry.WithCredential(registry.Credential{User: "node", Password: "wrong"}))
	require.NoError(t, err)
	require.ErrorIs(t, bad.Ping(ctx), errdefs.ErrUnauthenticated)

	img, err := random.Image(1024, 2)
	require.NoError(t, err)
	ref, err := name.ParseReference(addr+"/envd/test:one", name.Insecure)
	require.NoError(t, err)
	require.NoError(t, remote.Write(ref, img, remote.WithAuth(&authn.Basic{Username: node.User, Password: node.Password})))
	got, err := remote.Image(ref, remote.WithAuth(&authn.Basic{Username: node.User, Password: node.Password}))
	require.NoError(t, err)
	want, _ := img.Digest()
	gotDigest, err := got.Digest()
	require.NoError(t, err)
	assert.Equal(t, want, gotDigest)

	store, err := objstore.NewS3(ctx, s3)
	require.NoError(t, err)
	objs, err := store.List(ctx, "")
	require.NoError(t, err)
	assert.NotEmpty(t, objs, "the registry's content is in the bucket")
}

// A credential file others can read stops the start with an error naming
// it: the password may be known.
func TestRegistryCommandRefusesOpenCredential(t *testing.T) {
	dir := t.TempDir()
	cred := filepath.Join(dir, "node.credential")
	require.NoError(t, os.WriteFile(cred, []byte("node:secret\n"), 0o644))
	_, done := startRegistryCmd(t, nil, "--data-dir", dir, "--node-credential-file", cred)
	select {
	case err := <-done:
		require.ErrorIs(t, err, errdefs.ErrPermissionDenied)
		assert.Contains(t, err.Error(), cred)
	case <-time.After(10 * time.Second):
		require.FailNow(t, fmt.Sprintf("envd registry started with %s open to others", cred))
	}
}
