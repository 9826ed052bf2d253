package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/client"
)

// sshTenant is a tenant with a running instance and a registered key, and
// the files Debian's OpenSSH client needs to reach envd's SSH endpoint
// strictly: the key pair and a known_hosts line made from GET /v1/info.
type sshTenant struct {
	token    string
	c        *client.Client
	instance string
	key      string // private key file
	dir      string
	kh       string // known_hosts
	host     string // 127.0.0.1
	port     string
	env      []string // NAME=value for ssh, beside the test process's environment
}

func newSSHTenant(t testing.TB, name string) *sshTenant {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	info, err := env.c.Info(c)
	require.NoError(t, err)
	require.NotNil(t, info.SSH, "info names the SSH endpoint")
	host, port, err := net.SplitHostPort(info.SSH.Addr)
	require.NoError(t, err)

	tenant := fmt.Sprintf("%s-%d", name, projectSeq.Add(1))
	tok, err := env.c.CreateToken(c, tenant, types.CreateTokenRequest{})
	require.NoError(t, err)
	tc, err := client.New(env.node.URL, tok.Token)
	require.NoError(t, err)
	project := fmt.Sprintf("ssh-%d", projectSeq.Add(1))
	_, err = tc.CreateProject(c, types.CreateProjectRequest{Name: project, Base: fixtureBase, RuntimeClass: projectClass(t)})
	require.NoError(t, err)
	in, err := tc.CreateInstance(c, project, types.CreateInstanceRequest{})
	require.NoError(t, err)
	require.Equal(t, types.StateRunning, in.State)
	t.Cleanup(func() { _, _ = tc.DeleteInstance(context.Background(), in.ID) })

	dir := t.TempDir()
	key := filepath.Join(dir, "id_ed25519")
	out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", tenant+"@test", "-f", key).CombinedOutput()
	require.NoError(t, err, "%s", out)
	pub, err := os.ReadFile(key + ".pub")
	require.NoError(t, err)
	k, err := tc.AddSSHKey(c, types.AddSSHKeyRequest{PublicKey: string(pub)})
	require.NoError(t, err)
	assert.Equal(t, tenant+"@test", k.Name, "named after the key's comment")
	fp, err := exec.Command("ssh-keygen", "-l", "-f", key+".pub").Output()
	require.NoError(t, err)
	assert.Contains(t, string(fp), k.Fingerprint, "the fingerprint ssh-keygen shows")

	kh := filepath.Join(dir, "known_hosts")
	require.NoError(t, os.WriteFile(kh, []byte(fmt.Sprintf("[%s]:%s %s\n", host, port, info.SSH.HostKey)), 0o600))
	return &sshTenant{token: tok.Token, c: tc, instance: in.ID, key: key, dir: dir, kh: kh, host: host, port: port}
}

// opts are the options every OpenSSH tool here gets: no config file, no
// prompt, the host key checked strictly, only the test's key.
func (s *sshTenant) opts() []string {
	return []string{"-F", "/dev/null", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
		"-o", "UserKnownHostsFile=" + s.kh, "-o", "GlobalKnownHostsFile=/dev/null",
		"-o", "IdentitiesOnly=yes", "-o", "IdentityAgent=none", "-i", s.key, "-o", "ConnectTimeout=20"}
}

// ssh runs ssh as user (an instance id) with stdin and args, ssh options
// and then, after "--", the command; it returns stdout, stderr and the
// exit code.
func (s *sshTenant) ssh(t testing.TB, user, stdin string, args ...string) (string, string, int) {
	t.Helper()
	all := append(s.opts(), "-p", s.port)
	var command []string
	for i, a := range args {
		if a == "--" {
			args, command = args[:i], args[i:]
			break
		}
	}
	all = append(all, args...)
	all = append(all, user+"@"+s.host)
	return runToolEnv(t, s.env, stdin, "ssh", append(all, command...)...)
}

func runTool(t testing.TB, stdin, name string, args ...string) (string, string, int) {
	t.Helper()
	return runToolEnv(t, nil, stdin, name, args...)
}

// runToolEnv is runTool with extra (NAME=value entries) added to the
// test process's environment, for that command only: tests that set
// variables for a tool can run in parallel.
func runToolEnv(t testing.TB, extra []string, stdin, name string, args ...string) (string, string, int) {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := commandContext(c, name, args...)
	if len(extra) > 0 {
		cmd.Env = append(os.Environ(), extra...)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(stdin), &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err, "%s %v", name, args)
	}
	return stdout.String(), stderr.String(), code
}

// A command's exit code, stdout and stderr come back apart; a script on
// stdin to `sh` (how VS Code Remote-SSH starts its server) runs; env
// requests pass allow-listed names only.
func TestRootSSHExec(t *testing.T) {
	t.Parallel()
	s := newSSHTenant(t, "sshexec")
	stdout, stderr, code := s.ssh(t, s.instance, "", "--", "echo out; echo err >&2; exit 3")
	assert.Equal(t, 3, code, "stderr: %s", stderr)
	assert.Equal(t, "out\n", stdout)
	assert.Equal(t, "err\n", stderr)

	stdout, stderr, code = s.ssh(t, s.instance, "echo from-stdin $HOME $USER $SHELL; exit 4\n", "--", "sh")
	assert.Equal(t, 4, code, "stderr: %s", stderr)
	assert.Equal(t, "from-stdin /root root /bin/sh\n", stdout)

	s.env = []string{"LC_ENVD_TEST=passed", "SECRET_ENVD_TEST=kept-out"}
	stdout, _, code = s.ssh(t, s.instance, "", "-o", "SendEnv=LC_ENVD_TEST SECRET_ENVD_TEST", "--", `echo "[$LC_ENVD_TEST][$SECRET_ENVD_TEST]"`)
	assert.Equal(t, 0, code)
	assert.Equal(t, "[passed][]\n", stdout)
}

// A shell on a terminal (-tt): the session has a pty, TERM comes from the
// client, and the shell's exit code is the session's.
func TestRootSSHShellPTY(t *testing.T) {
	t.Parallel()
	s := newSSHTenant(t, "sshpty")
	s.env = []string{"TERM=xterm-envd"}
	stdout, stderr, code := s.ssh(t, s.instance, "tty; echo TERM=$TERM; cd; pwd; exit 7\n", "-tt")
	assert.Equal(t, 7, code, "stdout: %s\nstderr: %s", stdout, stderr)
	assert.Contains(t, stdout, "/dev/pts/")
	assert.Contains(t, stdout, "TERM=xterm-envd")
	assert.Contains(t, stdout, "/root")
}

// scp (SFTP protocol in OpenSSH 9.2) copies a binary file both ways
// unchanged; sftp lists a directory; a symlink or a path that points out
// of the instance's root does not reach the node's files.
func TestRootSSHFileTransfer(t *testing.T) {
	t.Parallel()
	s := newSSHTenant(t, "sshscp")
	data := make([]byte, 3<<20+12345)
	_, err := rand.Read(data)
	require.NoError(t, err)
	src := filepath.Join(s.dir, "blob")
	require.NoError(t, os.WriteFile(src, data, 0o640))
	scp := func(args ...string) {
		t.Helper()
		all := append(s.opts(), "-P", s.port)
		stdout, stderr, code := runTool(t, "", "scp", append(all, args...)...)
		require.Equal(t, 0, code, "scp %v\nstdout: %s\nstderr: %s", args, stdout, stderr)
	}
	remote := s.instance + "@" + s.host + ":"
	scp(src, remote+"/tmp/blob")
	inside := mustShAs(t, s, "sha256sum /tmp/blob | cut -d' ' -f1; stat -c %s /tmp/blob")
	local, _ := exec.Command("sha256sum", src).Output()
	assert.Equal(t, strings.Fields(string(local))[0]+"\n"+fmt.Sprint(len(data)), inside, "the upload arrived unchanged")

	back := filepath.Join(s.dir, "back")
	scp(remote+"/tmp/blob", back)
	got, err := os.ReadFile(back)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(data, got), "the download came back unchanged")

	// A relative path lands in the home directory.
	scp(src, remote+"rel-blob")
	assert.Equal(t, fmt.Sprint(len(data)), mustShAs(t, s, "stat -c %s /root/rel-blob"))

	// Escapes: the node has a secret; the instance links to its path.
	secretDir, err := os.MkdirTemp("", "envd-ssh-secret-")
	require.NoError(t, err)
	defer os.RemoveAll(secretDir)
	secret := filepath.Join(secretDir, "secret")
	require.NoError(t, os.WriteFile(secret, []byte("node secret\n"), 0o644))
	mustShAs(t, s, "ln -s "+secret+" /tmp/escape && ln -s / /tmp/rootlink")

	batch := strings.Join([]string{
		"pwd",
		"ls -l /fixtures",
		"-get /tmp/escape " + filepath.Join(s.dir, "escape"),
		"-get /tmp/rootlink" + secret + " " + filepath.Join(s.dir, "rootlink"),
		"-get ../../../../../.." + secret + " " + filepath.Join(s.dir, "dotdot"),
		"mkdir /tmp/made",
		"put " + src + " /tmp/made/put",
		"rename /tmp/made/put /tmp/made/moved",
		"ls /tmp/made",
	}, "\n") + "\n"
	all := append(s.opts(), "-P", s.port, "-b", "-", s.instance+"@"+s.host)
	stdout, stderr, code := runTool(t, batch, "sftp", all...)
	require.Equal(t, 0, code, "stdout: %s\nstderr: %s", stdout, stderr)
	assert.Contains(t, stdout, "Remote working directory: /root\n", "sftp starts in the user's home")
	assert.Contains(t, stdout, "modify-me")
	assert.Contains(t, stdout, "keep")
	assert.Contains(t, stdout, "/tmp/made/moved")
	for _, name := range []string{"escape", "rootlink", "dotdot"} {
		_, err := os.Stat(filepath.Join(s.dir, name))
		assert.True(t, os.IsNotExist(err), "%s: the node's file must not be reachable", name)
	}
	assert.Contains(t, stderr, "not found", "the escaping paths do not exist inside the instance")
	assert.Equal(t, fmt.Sprint(len(data)), mustShAs(t, s, "stat -c %s /tmp/made/moved"))
}

// SFTP has the file API's rights and no more, in a real instance as its
// root and with OpenSSH's sftp: procfs (the init's oom_score_adj, the
// kernel's symbols) and device nodes are refused, and the init's
// oom_score_adj is unchanged.
func TestRootSSHSFTPRefusesKernelFiles(t *testing.T) {
	t.Parallel()
	s := newSSHTenant(t, "sshproc")
	before := mustShAs(t, s, "cat /proc/1/oom_score_adj")
	value := filepath.Join(s.dir, "oom")
	require.NoError(t, os.WriteFile(value, []byte("1000\n"), 0o644))
	batch := strings.Join([]string{
		"-reput " + value + " /proc/1/oom_score_adj", // in place, as a resumed upload writes
		"-put " + value + " /proc/1/oom_score_adj",
		"-get /proc/kallsyms " + filepath.Join(s.dir, "kallsyms"),
		"-get /dev/zero " + filepath.Join(s.dir, "zero"),
		"-ls /proc",
	}, "\n") + "\n"
	all := append(s.opts(), "-P", s.port, "-b", "-", s.instance+"@"+s.host)
	stdout, stderr, code := runTool(t, batch, "sftp", all...)
	require.Equal(t, 0, code, "stdout: %s\nstderr: %s", stdout, stderr)
	assert.Equal(t, before, mustShAs(t, s, "cat /proc/1/oom_score_adj"), "the init's oom_score_adj is unchanged")
	for _, name := range []string{"kallsyms", "zero"} {
		_, err := os.Stat(filepath.Join(s.dir, name))
		assert.True(t, os.IsNotExist(err), "%s was not read", name)
	}
	assert.Contains(t, stderr, "Permission denied", "stderr: %s", stderr)
}

func mustShAs(t *testing.T, s *sshTenant, script string) string {
	t.Helper()
	res, err := s.c.Exec(ctx(t), s.instance, types.ExecRequest{Args: []string{"/bin/sh", "-c", script}})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, "%s: %s %s", script, res.Stdout, res.Stderr)
	return strings.TrimSpace(res.Stdout)
}

// ssh -L forwards a local port to a port of the instance: an HTTP request
// goes in, the page comes back.
func TestRootSSHForward(t *testing.T) {
	t.Parallel()
	s := newSSHTenant(t, "sshfwd")
	mustShAs(t, s, "mkdir -p /www && echo hello-through-ssh > /www/index.html && (httpd -p 8080 -h /www &) && sleep 0.2")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	local := ln.Addr().String()
	ln.Close()
	all := append(s.opts(), "-p", s.port, "-N", "-o", "ExitOnForwardFailure=yes", "-L", local+":localhost:8080", s.instance+"@"+s.host)
	c, cancel := context.WithCancel(context.Background())
	defer cancel()
	fwd := commandContext(c, "ssh", all...)
	var stderr bytes.Buffer
	fwd.Stderr = &stderr
	require.NoError(t, fwd.Start())
	defer func() { cancel(); _ = fwd.Wait() }()
	var body string
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + local + "/")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return resp.StatusCode == http.StatusOK
	}, 30*time.Second, 200*time.Millisecond, "ssh stderr: %s", &stderr)
	assert.Equal(t, "hello-through-ssh\n", body)

	// Only the instance's own ports: a forward to another host is refused.
	stdout, errOut, _ := s.ssh(t, s.instance, "", "-W", "192.0.2.1:80")
	assert.Empty(t, stdout)
	assert.Contains(t, errOut, "only localhost")
}

// A key of another tenant does not log in to this tenant's instance, nor
// does a key to an instance that does not exist; both read the same.
func TestRootSSHRefusals(t *testing.T) {
	t.Parallel()
	a := newSSHTenant(t, "ssha")
	b := newSSHTenant(t, "sshb")
	_, errOther, code := b.ssh(t, a.instance, "", "--", "true")
	assert.Equal(t, 255, code)
	assert.Contains(t, errOther, "Permission denied (publickey)")
	_, errUnknown, code := a.ssh(t, "i-00000000000000000000", "", "--", "true")
	assert.Equal(t, 255, code)
	assert.Contains(t, errUnknown, "Permission denied (publickey)")
	assert.Equal(t, strings.ReplaceAll(errOther, a.instance, "X"), strings.ReplaceAll(errUnknown, "i-00000000000000000000", "X"), "no oracle")

	// The same key again is a conflict; the key of another tenant is
	// another tenant's business.
	pub, err := os.ReadFile(a.key + ".pub")
	require.NoError(t, err)
	_, err = a.c.AddSSHKey(ctx(t), types.AddSSHKeyRequest{PublicKey: string(pub)})
	assert.ErrorContains(t, err, "already_exists")
	// After removal the key logs in no more.
	keys, err := a.c.ListSSHKeys(ctx(t))
	require.NoError(t, err)
	require.Len(t, keys, 1)
	_, err = a.c.DeleteSSHKey(ctx(t), keys[0].ID)
	require.NoError(t, err)
	_, errGone, code := a.ssh(t, a.instance, "", "--", "true")
	assert.Equal(t, 255, code)
	assert.Contains(t, errGone, "Permission denied (publickey)")
}

// envctl ssh needs no key: ssh's ProxyCommand is envctl ssh-proxy, over
// the API's WebSocket, logged in by the token; envctl ssh-config's block
// works with plain ssh. Another tenant's instance is not found.
func TestRootSSHKeyless(t *testing.T) {
	t.Parallel()
	s := newSSHTenant(t, "sshkeyless")
	other := newSSHTenant(t, "sshkeylessb")
	bin := buildEnvctl(t)
	home := t.TempDir()
	// envctl's environment, and ssh's (its ProxyCommand is envctl).
	runTool := func(t *testing.T, stdin, name string, args ...string) (string, string, int) {
		t.Helper()
		return runToolEnv(t, []string{"XDG_CONFIG_HOME=" + home, "ENVD_URL=" + env.node.URL, "ENVD_TOKEN=" + s.token},
			stdin, name, args...)
	}

	stdout, stderr, code := runTool(t, "", bin, "ssh", s.instance, "--", "echo keyless; exit 6")
	assert.Equal(t, 6, code, "stderr: %s", stderr)
	assert.Equal(t, "keyless\n", stdout)
	kh, err := os.ReadFile(filepath.Join(home, "envd", "known_hosts"))
	require.NoError(t, err)
	assert.Contains(t, string(kh), "envd-node-"+env.node.Name()+" ssh-ed25519 ")

	stdout, stderr, code = runTool(t, "", bin, "ssh", other.instance, "--", "true")
	assert.NotEqual(t, 0, code)
	assert.Empty(t, stdout)
	assert.Contains(t, stderr, "not found")

	cfg, stderr, code := runTool(t, "", bin, "ssh-config", s.instance)
	require.Equal(t, 0, code, "stderr: %s", stderr)
	assert.Contains(t, cfg, "Host envd-"+s.instance+"\n")
	cfgFile := filepath.Join(home, "ssh_config")
	require.NoError(t, os.WriteFile(cfgFile, []byte(cfg), 0o600))
	stdout, stderr, code = runTool(t, "", "ssh", "-F", cfgFile, "-o", "BatchMode=yes", "envd-"+s.instance, "--", "echo via-config")
	assert.Equal(t, 0, code, "stderr: %s", stderr)
	assert.Equal(t, "via-config\n", stdout)

	// One block for every instance: Host envd-*, the instance from %n.
	cfg, _, code = runTool(t, "", bin, "ssh-config")
	require.Equal(t, 0, code)
	require.NoError(t, os.WriteFile(cfgFile, []byte(cfg), 0o600))
	stdout, stderr, code = runTool(t, "", "ssh", "-F", cfgFile, "-o", "BatchMode=yes", "envd-"+s.instance, "--", "echo wildcard")
	assert.Equal(t, 0, code, "stderr: %s", stderr)
	assert.Equal(t, "wildcard\n", stdout)
}

// The round trip of `true` in an instance: a new ssh connection with a key
// (handshake, login, session), envctl ssh (the same through envctl's
// WebSocket tunnel), envctl exec (a process and one API call) and an exec
// call of an open API client. Run:
//
//	go test -run '^$' -bench BenchmarkRootSSHRoundTrip -benchtime 20x ./e2e/
func BenchmarkRootSSHRoundTrip(b *testing.B) {
	s := newSSHTenant(b, "sshbench")
	bin := buildEnvctl(b)
	b.Setenv("XDG_CONFIG_HOME", b.TempDir())
	b.Setenv("ENVD_URL", env.node.URL)
	b.Setenv("ENVD_TOKEN", s.token)
	check := func(b *testing.B, code int, stderr string) {
		if code != 0 {
			b.Fatalf("exit %d: %s", code, stderr)
		}
	}
	b.Run("ssh-key", func(b *testing.B) {
		for b.Loop() {
			_, stderr, code := s.ssh(b, s.instance, "", "--", "true")
			check(b, code, stderr)
		}
	})
	b.Run("envctl-ssh", func(b *testing.B) {
		for b.Loop() {
			_, stderr, code := runTool(b, "", bin, "ssh", s.instance, "--", "true")
			check(b, code, stderr)
		}
	})
	b.Run("envctl-exec", func(b *testing.B) {
		for b.Loop() {
			_, stderr, code := runTool(b, "", bin, "exec", s.instance, "--", "true")
			check(b, code, stderr)
		}
	})
	b.Run("api-exec", func(b *testing.B) {
		for b.Loop() {
			res, err := s.c.Exec(context.Background(), s.instance, types.ExecRequest{Args: []string{"true"}})
			require.NoError(b, err)
			check(b, res.ExitCode, res.Stderr)
		}
	})
}
