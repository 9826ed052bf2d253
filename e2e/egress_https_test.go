package e2e

import (
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/internal/netns"
	"github.com/envd-dev/envd/registry/memimage"
	"github.com/envd-dev/envd/runtime/egress"
)

// testCA is a CA of the test's own, for the HTTPS servers instances
// reach: the shared node trusts it upstream, instances do not.
type testCA struct {
	ca   *egress.CA
	file string // its certificate, PEM
}

func newTestCA(name, file string) (*testCA, error) {
	cert, key, err := egress.GenerateCA(name)
	if err != nil {
		return nil, err
	}
	ca, err := egress.ParseCA(cert, key)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(file, cert, 0o644); err != nil {
		return nil, err
	}
	return &testCA{ca: ca, file: file}, nil
}

// curlBase is a base image with curl: the fixture's busybox plus the
// host's curl and the shared libraries it loads (busybox's wget and
// ssl_client cannot speak TLS to Go or OpenSSL 3 servers here).
const curlBase = "curl-busybox"

var curlOnce struct {
	sync.Once
	err error
}

func importCurlImage(t *testing.T) string {
	t.Helper()
	curlOnce.Do(func() {
		curlOnce.err = func() error {
			dir := filepath.Join(env.tmpDir, "rootfs-curl")
			script, _ := filepath.Abs("../scripts/busybox-rootfs.sh")
			if out, err := exec.Command("bash", script, dir).CombinedOutput(); err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			curl, err := exec.LookPath("curl")
			if err != nil {
				return fmt.Errorf("curl is not installed on the host: %w", err)
			}
			out, err := exec.Command("ldd", curl).Output()
			if err != nil {
				return fmt.Errorf("ldd %s: %w", curl, err)
			}
			files := []string{curl}
			for _, line := range strings.Split(string(out), "\n") {
				for _, f := range strings.Fields(line) {
					if strings.HasPrefix(f, "/") {
						files = append(files, f)
					}
				}
			}
			for _, f := range files {
				dst := filepath.Join(dir, f)
				if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
					return err
				}
				if out, err := exec.Command("cp", "-L", f, dst).CombinedOutput(); err != nil {
					return fmt.Errorf("cp %s: %v: %s", f, err, out)
				}
			}
			tarball, err := tarDir(dir)
			if err != nil {
				return err
			}
			_, err = env.c.ImportImage(ctx(t), curlBase, bytes.NewReader(tarball))
			return err
		}()
	})
	require.NoError(t, curlOnce.err)
	return curlBase
}

// tlsHeaderServer is an HTTPS server in the private service's namespace,
// with certificates of the test's upstream CA, that keeps the X-Api-Key of
// the last request on the test's side and answers "ok BODY".
type tlsHeaderServer struct {
	mu   sync.Mutex
	last string
	n    int
}

func (h *tlsHeaderServer) lastKey() (string, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.last, h.n
}

// serveTLSHeaders serves HTTPS on addr. A name starting "wrong." gets a
// certificate for another name (an upstream the proxy must not trust).
func (s *privateService) serveTLSHeaders(t *testing.T, addr, body string) *tlsHeaderServer {
	t.Helper()
	ln, err := netns.Listen("/run/netns/"+s.name, "tcp4", addr)
	require.NoError(t, err)
	h := &tlsHeaderServer{}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.last, h.n = r.Header.Get("X-Api-Key"), h.n+1
		h.mu.Unlock()
		fmt.Fprintln(w, "ok", body)
	}), TLSConfig: &tls.Config{GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
		name := hello.ServerName
		if strings.HasPrefix(name, "wrong.") {
			name = "someone-else.test"
		}
		return env.upstreamCA.ca.Certificate(name)
	}}}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })
	return h
}

// TestRootEgressHTTPSSecrets: a secret bound to a host with scheme https
// reaches the host's HTTPS server as a header, though the instance calls
// it with a plain `curl https://HOST/` and no token: the node's proxy
// terminates TLS with a certificate of the node's egress CA (which the
// instance trusts through SSL_CERT_FILE and friends), and verifies the
// server's real certificate upstream (the test's CA, given to the node as
// its extra upstream roots). Rotation and revocation apply to the next
// request; a host without a binding is not intercepted (the instance sees
// the server's own certificate); an upstream certificate that does not
// verify is a 502 the instance sees and a denial in the project's log. The
// secret is nowhere in the instance: its files, its processes'
// environments, a saved layer, and the memory image of a gVisor checkpoint
// taken after the requests (pulled from the registry and searched). Once
// on gVisor (with the memory image) and once on runc (a save's layer).
func TestRootEgressHTTPSSecrets(t *testing.T) {
	t.Parallel()
	for _, class := range []string{"gvisor", "runc"} {
		t.Run(class, func(t *testing.T) {
			t.Parallel()
			egressHTTPSSecrets(t, class)
		})
	}
}

func egressHTTPSSecrets(t *testing.T, class string) {
	base := importCurlImage(t)
	seq := projectSeq.Add(1)
	domain := fmt.Sprintf("tls%d.test", seq)
	api, plain, wrong := "api."+domain, "plain."+domain, "wrong."+domain
	mark := make([]byte, 12)
	_, _ = rand.Read(mark)
	marker := "resp" + hex.EncodeToString(mark) // what the server answers: found in memory, as a control
	svc := newPrivateService(t)
	hs := svc.serveTLSHeaders(t, svc.addr+":443", marker)
	for _, n := range []string{api, plain, wrong} {
		env.dns.Set(n, svc.addr)
	}

	b := make([]byte, 12)
	_, _ = rand.Read(b)
	one, two := "sk1"+hex.EncodeToString(b), "sk2"+hex.EncodeToString(b)
	name, wrongName := fmt.Sprintf("tlskey-%d", seq), fmt.Sprintf("tlswrong-%d", seq)
	for _, n := range []string{name, wrongName} {
		_, err := env.c.SetSecret(ctx(t), n, one)
		require.NoError(t, err)
		t.Cleanup(func() { _, _ = env.c.DeleteSecret(ctx(t), n) })
	}
	sec, err := env.c.BindSecret(ctx(t), name, types.SecretBinding{Host: api, Scheme: "https", Header: "X-Api-Key", Format: "{{value}}"})
	require.NoError(t, err)
	require.NotNil(t, sec.Binding)
	assert.Equal(t, "https", sec.Binding.Scheme)
	_, err = env.c.BindSecret(ctx(t), wrongName, types.SecretBinding{Host: wrong, Scheme: "https", Header: "X-Api-Key", Format: "{{value}}"})
	require.NoError(t, err)

	p := fmt.Sprintf("egtls-%d", seq)
	_, err = env.c.CreateProject(ctx(t), types.CreateProjectRequest{Name: p, Base: base, Egress: "allow:*." + domain, RuntimeClass: class})
	require.NoError(t, err)
	in := up(t, p, 0)
	upstreamPEM, err := os.ReadFile(env.upstreamCA.file)
	require.NoError(t, err)
	mustSh(t, in.ID, fmt.Sprintf("printf '%%s' '%s' > /root/upstream-ca.pem", upstreamPEM))

	// curl returns curl's output (body, then the status code on its own
	// line; with verbose, the TLS details too) and its exit code.
	curl := func(args string) (string, int) {
		res := sh(t, in.ID, "curl -sS --max-time 20 -w '\\n%{http_code}\\n' "+args+" 2>&1")
		t.Logf("curl %s: exit %d\n%s", args, res.ExitCode, res.Stdout)
		return res.Stdout, res.ExitCode
	}

	// A bound host: the instance trusts the node's certificate for it, the
	// header reaches the server.
	out, code := curl("-v https://" + api + "/")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "ok "+marker)
	assert.Contains(t, out, "\n200\n")
	assert.Contains(t, out, "envd egress CA", "the certificate the instance sees is the node's")
	key, _ := hs.lastKey()
	assert.Equal(t, one, key, "the bound secret reaches the server as a header")

	// A host without a binding passes through: the instance sees the
	// server's own certificate, which only the test's CA verifies.
	_, before := hs.lastKey()
	out, code = curl("https://" + plain + "/")
	assert.NotEqual(t, 0, code, "the instance does not trust the test's CA: %s", out)
	out, code = curl("-v --cacert /root/upstream-ca.pem https://" + plain + "/")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "envd e2e upstream CA", "the server's own certificate")
	assert.NotContains(t, out, "envd egress CA")
	key, after := hs.lastKey()
	assert.Equal(t, before+1, after)
	assert.Empty(t, key, "no header to a host without a binding")

	// Rotation applies to the next request.
	_, err = env.c.SetSecret(ctx(t), name, two)
	require.NoError(t, err)
	out, code = curl("https://" + api + "/")
	require.Equal(t, 0, code, out)
	key, _ = hs.lastKey()
	assert.Equal(t, two, key, "a rotation applies to the next request")

	// A terminated connection serves its SNI's host only: its upstream
	// was verified for that name.
	_, before = hs.lastKey()
	out, _ = curl("-H 'Host: " + plain + "' https://" + api + "/")
	assert.Contains(t, out, "\n421\n", "a request for another host on a terminated connection")
	_, after = hs.lastKey()
	assert.Equal(t, before, after, "the misdirected request did not reach the server")

	// What interception costs a request, as curl in the instance sees it
	// (logged, not asserted: a figure of a shared machine): 10 new
	// connections each, to the terminated host and to the passed-through one.
	timing := func(args string) string {
		return mustSh(t, in.ID, "for i in 1 2 3 4 5 6 7 8 9 10; do curl -s -o /dev/null -w '%{time_total} ' "+args+"; done")
	}
	t.Logf("curl time_total (s), terminated %s: %s", api, timing("https://"+api+"/"))
	t.Logf("curl time_total (s), passed through %s: %s", plain, timing("--cacert /root/upstream-ca.pem https://"+plain+"/"))

	// An upstream whose certificate does not verify: 502 with a clear
	// body, a denial logged, nothing sent.
	_, before = hs.lastKey()
	out, _ = curl("https://" + wrong + "/")
	assert.Contains(t, out, "upstream certificate not trusted")
	assert.Contains(t, out, "\n502\n")
	_, after = hs.lastKey()
	assert.Equal(t, before, after, "no request reached the untrusted upstream")
	require.Eventually(t, func() bool {
		log, err := env.c.EgressLog(ctx(t), p, 20)
		require.NoError(t, err)
		for _, d := range log {
			if d.Kind == "tls" && d.Name == wrong && strings.Contains(d.Reason, "upstream certificate not trusted") {
				return true
			}
		}
		return false
	}, 10*time.Second, 100*time.Millisecond, "the failed verification is in the project's egress log")

	// A process keeps the answer in memory until the checkpoint (the
	// control: what went through the instance is in its memory image).
	mustSh(t, in.ID, "(R=$(curl -s https://"+api+"/); while :; do sleep 1; echo \"$R\" >/dev/null; done) </dev/null >/dev/null 2>&1 &")
	require.Eventually(t, func() bool { _, n := hs.lastKey(); return n > after }, 20*time.Second, 100*time.Millisecond)

	// The values are not in the instance: environments, a saved layer, a
	// memory image, files (searched last: the search's own arguments hold
	// the values, and would be in the memory image).
	envs := sh(t, in.ID, "cat /proc/[0-9]*/environ | tr '\\0' '\\n'")
	assert.Contains(t, envs.Stdout, "SSL_CERT_FILE="+"/run/envd/egress-ca/bundle.crt", "the instance is pointed at the bundle")
	assert.NotContains(t, envs.Stdout, one)
	assert.NotContains(t, envs.Stdout, two)
	caFiles := mustSh(t, in.ID, "cat /run/envd/egress-ca/ca.crt /run/envd/egress-ca/bundle.crt")
	assert.NotContains(t, caFiles, "PRIVATE KEY", "the CA's key never enters the instance")

	mustSh(t, in.ID, "echo saved > /egress-tls-marker")
	var res types.CheckpointResult
	var version int
	if class == "gvisor" {
		res = memCheckpoint(t, env.c, in.ID)
		require.NotNil(t, res.Checkpoint.Memory, "the checkpoint holds a memory image")
		version = res.Checkpoint.Version
	} else {
		_, saved := save(t, in.ID, "after secret use")
		version = saved.Version
	}
	tarBytes := topLayerTar(t, p, version)
	require.Contains(t, tarBytes, "egress-tls-marker", "the layer read is the saved one")
	assert.NotContains(t, tarBytes, one)
	assert.NotContains(t, tarBytes, two)
	assert.NotContains(t, tarBytes, "PRIVATE KEY")

	if class == "gvisor" {
		searchMemoryImage(t, res.Checkpoint.Memory.Image, marker, one, two)
	}

	pattern := " -e " + one + " -e " + two
	files := sh(t, in.ID, "grep -rlsF"+pattern+" / --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev")
	assert.Empty(t, files.Stdout, "files of the instance holding the secret")

	// Revocation applies to the next connection: the host is no longer
	// intercepted, and no header is added.
	_, err = env.c.DeleteSecret(ctx(t), name)
	require.NoError(t, err)
	_, before = hs.lastKey()
	out, code = curl("-v --cacert /root/upstream-ca.pem https://" + api + "/")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "envd e2e upstream CA", "after revocation the instance reaches the server itself")
	key, after = hs.lastKey()
	assert.Equal(t, before+1, after)
	assert.Empty(t, key, "a revocation applies to the next request")
}

// searchMemoryImage pulls memory image ref (repo@digest) from the registry
// as a resume would, and requires that none of its files holds a secret or
// a private key, and that one holds marker (what the instance kept in
// memory: the search finds what is there).
func searchMemoryImage(t *testing.T, ref, marker string, secrets ...string) {
	t.Helper()
	store, err := memimage.New(env.node.RegistryClient())
	require.NoError(t, err)
	memRepo, digest, ok := strings.Cut(ref, "@")
	require.True(t, ok, ref)
	art, err := store.Get(ctx(t), memRepo, digest)
	require.NoError(t, err)
	memDir := filepath.Join(t.TempDir(), "memory")
	require.NoError(t, store.Pull(ctx(t), art, memDir))
	var memBytes int64
	foundMarker := false
	entries, err := os.ReadDir(memDir)
	require.NoError(t, err)
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(memDir, e.Name()))
		require.NoError(t, err)
		memBytes += int64(len(data))
		foundMarker = foundMarker || bytes.Contains(data, []byte(marker))
		for i, sec := range secrets {
			assert.False(t, bytes.Contains(data, []byte(sec)), "memory image file %s holds secret value %d", e.Name(), i)
		}
		assert.False(t, bytes.Contains(data, []byte("PRIVATE KEY")), "memory image file %s holds a private key", e.Name())
	}
	t.Logf("memory image: %d files, %d bytes searched", len(entries), memBytes)
	assert.True(t, foundMarker, "the answer the instance holds in memory is in the memory image (the search can find what is there)")
}
