package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/client"
)

// previewDomain is the shared node's preview domain (sharedNodeConfig).
// Requests go to the node's loopback address with the Host header set:
// no DNS is involved.
const previewDomain = "preview.test"

// portsInstance starts an instance with two busybox httpd servers: one on
// 127.0.0.1:8080 only (like a dev server bound to loopback), one on
// 0.0.0.0:8081, and waits until the ports list shows both.
func portsInstance(t *testing.T) (string, types.Instance) {
	t.Helper()
	project := newProject(t, "ports")
	in := up(t, project, 0)
	mustSh(t, in.ID, `mkdir -p /www /www2 && echo hello-loopback > /www/index.html && echo hello-any > /www2/index.html
		httpd -p 127.0.0.1:8080 -h /www && httpd -p 0.0.0.0:8081 -h /www2`)
	require.Eventually(t, func() bool {
		ps, err := env.c.ListPorts(ctx(t), in.ID)
		return err == nil && len(ps) >= 2
	}, 20*time.Second, 200*time.Millisecond, "the httpd servers never listened")
	return project, in
}

func portsGet(t *testing.T, req *http.Request) (int, string, *http.Response) {
	t.Helper()
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b), resp
}

func portsPathReq(t *testing.T, c *client.Client, id string, port int, path, token string) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx(t), http.MethodGet, c.PortURL(id, port, path), nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return req
}

// hostReq is a request of the host form: to the node's address, with the
// preview host as Host.
func portsHostReq(t *testing.T, port int, id, pathQuery string, cookie *http.Cookie) *http.Request {
	t.Helper()
	u, err := url.Parse(env.node.URL)
	require.NoError(t, err)
	req, err := http.NewRequestWithContext(ctx(t), http.MethodGet, env.node.URL+pathQuery, nil)
	require.NoError(t, err)
	req.Host = fmt.Sprintf("%d-%s.%s:%s", port, id, previewDomain, u.Port())
	if cookie != nil {
		req.AddCookie(cookie)
	}
	return req
}

func TestRootPortsListAndPathForm(t *testing.T) {
	t.Parallel()
	_, in := portsInstance(t)
	ps, err := env.c.ListPorts(ctx(t), in.ID)
	require.NoError(t, err)
	var seen []string
	for _, p := range ps {
		seen = append(seen, fmt.Sprintf("%s/%s:%d", p.Protocol, p.Address, p.Port))
		if p.Port == 8080 {
			assert.Contains(t, p.URL, "8080-"+in.ID+"."+previewDomain)
		}
	}
	assert.Contains(t, seen, "tcp/127.0.0.1:8080")
	assert.Contains(t, seen, "tcp/0.0.0.0:8081")

	for _, tc := range []struct {
		port int
		want string
	}{{8080, "hello-loopback"}, {8081, "hello-any"}} {
		status, body, _ := portsGet(t, portsPathReq(t, env.c, in.ID, tc.port, "/index.html", env.node.Token))
		assert.Equal(t, http.StatusOK, status, body)
		assert.Equal(t, tc.want+"\n", body)

		status, body, _ = portsGet(t, portsPathReq(t, env.c, in.ID, tc.port, "/index.html", ""))
		assert.Equal(t, http.StatusUnauthorized, status, body)
		assert.NotContains(t, body, "hello")
	}
	status, body, _ := portsGet(t, portsPathReq(t, env.c, in.ID, 8080, "/no-such-page", env.node.Token))
	assert.Equal(t, http.StatusNotFound, status, "the instance's own 404: %s", body)

	status, body, _ = portsGet(t, portsPathReq(t, env.c, in.ID, 9999, "/", env.node.Token))
	assert.Equal(t, http.StatusBadGateway, status)
	assert.Contains(t, body, `"code":"port_unreachable"`)

	t.Run("another tenant", func(t *testing.T) {
		tok, err := env.c.CreateToken(ctx(t), fmt.Sprintf("ports-other-%d", projectSeq.Add(1)), types.CreateTokenRequest{})
		require.NoError(t, err)
		other, err := client.New(env.node.URL, tok.Token)
		require.NoError(t, err)
		status, body, _ := portsGet(t, portsPathReq(t, other, in.ID, 8080, "/index.html", tok.Token))
		assert.Equal(t, http.StatusNotFound, status, body)
		assert.NotContains(t, body, "hello")
		_, err = other.ListPorts(ctx(t), in.ID)
		assert.Equal(t, "not_found", portsCode(err))
		_, err = other.PreviewToken(ctx(t), in.ID, 8080, "")
		assert.Equal(t, "not_found", portsCode(err))
		_, err = other.DialPort(ctx(t), in.ID, 8080)
		assert.Equal(t, "not_found", portsCode(err))
	})
}

func portsCode(err error) string {
	var e *types.Error
	if errors.As(err, &e) {
		return e.Code
	}
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestRootPortsHostForm(t *testing.T) {
	t.Parallel()
	project, in := portsInstance(t)

	status, body, _ := portsGet(t, portsHostReq(t, 8080, in.ID, "/index.html", nil))
	assert.Equal(t, http.StatusUnauthorized, status)
	assert.NotContains(t, body, "hello")
	assert.NotContains(t, body, "<")

	short, err := env.c.PreviewToken(ctx(t), in.ID, 8080, "1s")
	require.NoError(t, err)
	time.Sleep(time.Until(short.ExpiresAt) + 100*time.Millisecond)
	status, body, _ = portsGet(t, portsHostReq(t, 8080, in.ID, "/index.html?envd_preview_token="+short.Token, nil))
	assert.Equal(t, http.StatusUnauthorized, status, "expired token: %s", body)
	assert.Contains(t, body, "expired")
	status, _, _ = portsGet(t, portsHostReq(t, 8080, in.ID, "/", &http.Cookie{Name: "envd_preview", Value: short.Token}))
	assert.Equal(t, http.StatusUnauthorized, status, "expired cookie")

	tok, err := env.c.PreviewToken(ctx(t), in.ID, 8080, "10m")
	require.NoError(t, err)
	require.NotEmpty(t, tok.URL)
	u, err := url.Parse(tok.URL)
	require.NoError(t, err)
	assert.Equal(t, fmt.Sprintf("8080-%s.%s", in.ID, previewDomain), u.Hostname())

	// A token of another port does not open this one.
	other, err := env.c.PreviewToken(ctx(t), in.ID, 8082, "10m")
	require.NoError(t, err)
	status, _, _ = portsGet(t, portsHostReq(t, 8080, in.ID, "/?envd_preview_token="+other.Token, nil))
	assert.Equal(t, http.StatusUnauthorized, status)

	// The URL's token: a cookie, then a redirect to the URL without it.
	status, _, resp := portsGet(t, portsHostReq(t, 8080, in.ID, "/index.html?"+u.RawQuery, nil))
	require.Equal(t, http.StatusSeeOther, status)
	assert.Equal(t, "/index.html", resp.Header.Get("Location"))
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "envd_preview" {
			cookie = c
		}
	}
	require.NotNil(t, cookie)
	assert.True(t, cookie.HttpOnly)
	assert.Equal(t, http.SameSiteLaxMode, cookie.SameSite)
	status, body, _ = portsGet(t, portsHostReq(t, 8080, in.ID, "/index.html", &http.Cookie{Name: cookie.Name, Value: cookie.Value}))
	assert.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, "hello-loopback\n", body)

	// A public port needs no token.
	status, _, _ = portsGet(t, portsHostReq(t, 8081, in.ID, "/index.html", nil))
	assert.Equal(t, http.StatusUnauthorized, status)
	pp, err := env.c.SetProjectPorts(ctx(t), project, types.ProjectPorts{Public: []int{8081}})
	require.NoError(t, err)
	assert.Equal(t, []int{8081}, pp.Public)
	status, body, _ = portsGet(t, portsHostReq(t, 8081, in.ID, "/index.html", nil))
	assert.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, "hello-any\n", body)
	status, _, _ = portsGet(t, portsHostReq(t, 8080, in.ID, "/index.html", nil))
	assert.Equal(t, http.StatusUnauthorized, status, "8080 is still private")
}

// wsEcho builds testdata/wsecho, copies it into the instance and starts
// it on 127.0.0.1:9000.
func wsEcho(t *testing.T, id string) { wsEchoOn(t, id, "127.0.0.1:9000") }

// wsEchoOn is wsEcho on addr (port 9000).
func wsEchoOn(tb testing.TB, id, addr string) {
	tb.Helper()
	c, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin := filepath.Join(tb.TempDir(), "wsecho")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "./testdata/wsecho")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	require.NoError(tb, err, "build wsecho: %s", out)
	b, err := os.ReadFile(bin)
	require.NoError(tb, err)
	var stderr bytes.Buffer
	code, err := env.c.ExecStream(c, id, types.ExecRequest{Args: []string{"/bin/sh", "-c", "cat > /wsecho && chmod +x /wsecho"}},
		types.Stdio{Stdin: bytes.NewReader(b), Stdout: io.Discard, Stderr: &stderr})
	require.NoError(tb, err)
	require.Equal(tb, 0, code, stderr.String())
	res, err := env.c.Exec(c, id, types.ExecRequest{Args: []string{"/bin/sh", "-c", "setsid /wsecho " + addr + " </dev/null >/tmp/wsecho.log 2>&1 &"}})
	require.NoError(tb, err)
	require.Equal(tb, 0, res.ExitCode, res.Stderr)
	require.Eventually(tb, func() bool {
		ps, err := env.c.ListPorts(c, id)
		for _, p := range ps {
			if p.Port == 9000 {
				return err == nil
			}
		}
		return false
	}, 20*time.Second, 200*time.Millisecond)
}

func TestRootPortsWebSocket(t *testing.T) {
	t.Parallel()
	project := newProject(t, "ports-ws")
	in := up(t, project, 0)
	wsEcho(t, in.ID)
	tok, err := env.c.PreviewToken(ctx(t), in.ID, 9000, "")
	require.NoError(t, err)
	nodeURL, err := url.Parse(env.node.URL)
	require.NoError(t, err)
	wsBase := "ws://" + nodeURL.Host
	for name, tc := range map[string]struct {
		url    string
		header http.Header
		host   string
	}{
		"path form": {url: wsBase + "/v1/instances/" + in.ID + "/ports/9000/echo", header: http.Header{"Authorization": {"Bearer " + env.node.Token}}},
		"host form": {url: wsBase + "/echo", header: http.Header{"Cookie": {"envd_preview=" + tok.Token}},
			host: fmt.Sprintf("9000-%s.%s:%s", in.ID, previewDomain, nodeURL.Port())},
	} {
		t.Run(name, func(t *testing.T) {
			c, cancel := context.WithTimeout(ctx(t), 30*time.Second)
			defer cancel()
			conn, resp, err := websocket.Dial(c, tc.url, &websocket.DialOptions{HTTPHeader: tc.header, Host: tc.host})
			require.NoError(t, err)
			defer conn.CloseNow()
			assert.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
			for _, msg := range []string{"hot", "reload"} {
				require.NoError(t, conn.Write(c, websocket.MessageText, []byte(msg)))
				_, got, err := conn.Read(c)
				require.NoError(t, err)
				assert.Equal(t, "echo:"+msg, string(got))
			}
			assert.NoError(t, conn.Close(websocket.StatusNormalClosure, ""))
		})
	}
}

var portForwarding = regexp.MustCompile(`Forwarding from (127\.0\.0\.1:\d+) -> 7000`)

func TestRootPortsPortForward(t *testing.T) {
	t.Parallel()
	project := newProject(t, "ports-fwd")
	in := up(t, project, 0)
	bin := buildEnvctl(t)

	// nc in the instance: sends one line, writes what it receives.
	mustSh(t, in.ID, `(echo from-instance | setsid nc -l -p 7000 >/tmp/got 2>/dev/null &)`)
	require.Eventually(t, func() bool {
		ps, _ := env.c.ListPorts(ctx(t), in.ID)
		for _, p := range ps {
			if p.Port == 7000 {
				return true
			}
		}
		return false
	}, 20*time.Second, 200*time.Millisecond)

	c, cancel := context.WithCancel(ctx(t))
	defer cancel()
	fwd := commandContext(c, bin, "port-forward", in.ID, ":7000")
	fwd.Env = append(os.Environ(), "ENVD_URL="+env.node.URL, "ENVD_TOKEN="+env.node.Token)
	stdout, err := fwd.StdoutPipe()
	require.NoError(t, err)
	var stderr bytes.Buffer
	fwd.Stderr = &stderr
	require.NoError(t, fwd.Start())
	t.Cleanup(func() { _ = fwd.Process.Kill(); _ = fwd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err, "envctl port-forward: %s", stderr.String())
	m := portForwarding.FindStringSubmatch(line)
	require.NotNil(t, m, "first line: %q", line)

	conn, err := net.DialTimeout("tcp", m[1], 10*time.Second)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.Write([]byte("from-host\n"))
	require.NoError(t, err)
	require.NoError(t, conn.(*net.TCPConn).CloseWrite()) // half-close: nc sees EOF
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(30*time.Second)))
	got, err := io.ReadAll(conn)
	require.NoError(t, err, "stderr of envctl: %s", stderr.String())
	assert.Equal(t, "from-instance\n", string(got))
	require.Eventually(t, func() bool {
		return sh(t, in.ID, "cat /tmp/got").Stdout == "from-host\n"
	}, 10*time.Second, 200*time.Millisecond, "the instance did not receive the bytes; stderr of envctl: %s", stderr.String())

	t.Run("closed port", func(t *testing.T) {
		_, err := env.c.DialPort(ctx(t), in.ID, 7001)
		assert.Equal(t, "port_unreachable", portsCode(err))
	})
}
