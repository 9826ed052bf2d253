package buildkit

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/envd-dev/envd/builder/buildkit/netplugin"
)

// hostPrefix begins the host name of RUN steps of a build with a grant;
// the rest is a hash of the grant.
const hostPrefix = "envd-build-"

// StepIDPrefix begins the network attachment id of each RUN step: a node
// restarted after being killed mid-build removes what is left under it.
// An underscore, which no project name (so no instance id) has.
const StepIDPrefix = "bk_"

// netServer answers the CNI plugin's calls (netplugin) on a unix socket
// only root reaches: it attaches a RUN step's namespace under the grant
// its host name names. A namespace without a known grant (BuildKit's pool,
// a build without network, a build that ended) keeps loopback only.
type netServer struct {
	path   string
	nsDir  string // BuildKit makes its namespaces here, named by container ID
	l      net.Listener
	net    Network
	log    *slog.Logger
	mu     sync.Mutex
	grants map[string]*held // by host name
	wg     sync.WaitGroup
}

func listenNet(path string, n Network, log *slog.Logger) (*netServer, error) {
	if len(path) > maxSocketPath {
		return nil, fmt.Errorf("build network socket %q is too long", path)
	}
	_ = os.Remove(path)
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("build network socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, err
	}
	s := &netServer{path: path, nsDir: filepath.Join(filepath.Dir(path), "root", "net", "cni"), l: l, net: n, log: log, grants: map[string]*held{}}
	s.wg.Add(1)
	go s.serve()
	return s, nil
}

func (s *netServer) close() {
	if s == nil {
		return
	}
	_ = s.l.Close()
	s.wg.Wait()
	_ = os.Remove(s.path)
}

// held is a grant and the number of builds running with it.
type held struct {
	g Grant
	n int
}

// grant registers g for one build under its host name; release forgets
// it when no build holds it (RUN steps that start later get loopback
// only).
//
// The host name is a hash of the grant, not a random token: BuildKit's
// cache key of a RUN step includes its host name, so a random one would
// run every step again in every build. A hash keeps the cache across
// builds (and node restarts) of one project and policy, and keeps the
// results of one policy's steps from being served to a build under
// another (a project without network never gets another's downloads). It
// is no secret: only envd sets BuildKit's host name option (the build
// argument BUILDKIT_SANDBOX_HOSTNAME is refused).
func (s *netServer) grant(g Grant) (string, func()) {
	h := sha256.Sum256([]byte(g.Group + "\x00" + g.Egress))
	host := hostPrefix + hex.EncodeToString(h[:10])
	s.mu.Lock()
	if s.grants[host] == nil {
		s.grants[host] = &held{g: g}
	}
	s.grants[host].n++
	s.mu.Unlock()
	return host, func() {
		s.mu.Lock()
		if h := s.grants[host]; h != nil {
			if h.n--; h.n == 0 {
				delete(s.grants, host)
			}
		}
		s.mu.Unlock()
	}
}

func (s *netServer) serve() {
	defer s.wg.Done()
	for {
		c, err := s.l.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				s.log.Warn("build network socket", "err", err)
			}
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(2 * time.Minute))
			var req netplugin.Request
			var rep netplugin.Reply
			if err := json.NewDecoder(bufio.NewReader(c)).Decode(&req); err != nil {
				rep.Error = "bad request: " + err.Error()
			} else if res, err := s.handle(req); err != nil {
				rep.Error = err.Error()
			} else {
				rep.Result = res
			}
			_ = json.NewEncoder(c).Encode(rep)
		}()
	}
}

// containerID is how BuildKit names a namespace (identity.NewID).
var containerID = regexp.MustCompile(`^[a-z0-9]{1,64}$`)

func (s *netServer) handle(req netplugin.Request) (json.RawMessage, error) {
	if !containerID.MatchString(req.ContainerID) {
		return nil, fmt.Errorf("container id %q", req.ContainerID)
	}
	// Only BuildKit's own namespaces, at the path it makes them.
	if filepath.Clean(req.Netns) != filepath.Join(s.nsDir, req.ContainerID) && req.Command != "DEL" {
		return nil, fmt.Errorf("network namespace %q is not BuildKit's", req.Netns)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	id := StepIDPrefix + req.ContainerID
	switch req.Command {
	case "DEL":
		netns := req.Netns
		if netns != "" && filepath.Clean(netns) != filepath.Join(s.nsDir, req.ContainerID) {
			netns = ""
		}
		return nil, s.net.Detach(ctx, id, netns)
	case "CHECK":
		return nil, nil
	case "ADD":
	default:
		return nil, fmt.Errorf("command %q", req.Command)
	}
	s.mu.Lock()
	h, ok := s.grants[req.Hostname]
	var g Grant
	if ok {
		g = h.g
	}
	s.mu.Unlock()
	if !ok || !strings.HasPrefix(req.Hostname, hostPrefix) {
		// A build that ended, or a host name not of ours: no network.
		return json.RawMessage(`{"cniVersion":"1.0.0"}`), nil
	}
	res, err := s.net.Attach(ctx, id, req.Netns, g)
	if err != nil {
		s.log.Warn("attach a build step's network", "id", id, "err", err)
		return nil, err
	}
	return res, nil
}

// pluginDir makes the CNI binary directory buildkitd runs plugins from:
// netplugin (the envd-agent binary under its name) and loopback from cni,
// the system's plugin directory (BuildKit adds a loopback network itself).
func (b *BuildKit) pluginDir(cni string) (string, error) {
	dir := filepath.Join(b.cfg.Dir, "cni")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	for name, target := range map[string]string{netplugin.Type: b.cfg.Plugin, "loopback": filepath.Join(cni, "loopback")} {
		if _, err := os.Stat(target); err != nil {
			return "", fmt.Errorf("CNI plugin %s: %w", name, err)
		}
		link := filepath.Join(dir, name)
		_ = os.Remove(link)
		if err := os.Symlink(target, link); err != nil {
			return "", err
		}
	}
	return dir, nil
}
