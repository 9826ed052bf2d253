// Package ports is the port proxy's part of the core (api.PortCore): the
// ports an instance listens on, connections to them (DialInstance),
// preview tokens (package envd/preview) and the projects' public ports.
// The proxying itself is the API's (api/ports.go).
package ports

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/names"
	"github.com/envd-dev/envd/envd/preview"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/internal/limiter"
	"github.com/envd-dev/envd/internal/netns"
	"github.com/envd-dev/envd/runtime"
	"github.com/envd-dev/envd/versions"
)

const (
	// DefaultPreviewTTL is a preview token's lifetime when its request
	// names none; MaxPreviewTTL the longest one given.
	DefaultPreviewTTL = time.Hour
	MaxPreviewTTL     = 7 * 24 * time.Hour
	// maxPublicPorts bounds a project's list of public ports.
	maxPublicPorts = 64
)

// Store is what the port part needs of the store.
type Store interface {
	// PreviewKey returns the cluster's preview key, storing candidate
	// when there is none yet.
	PreviewKey(ctx context.Context, candidate []byte) ([]byte, error)
	PublicPorts(ctx context.Context, tenant, project string) ([]int, error)
	ForwardedPorts(ctx context.Context, tenant, project string) ([]versions.ForwardedPort, error)
	// SetPorts replaces the public ports and, unless forwarded is nil,
	// the forwarded ones.
	SetPorts(ctx context.Context, tenant, project string, public []int, forwarded []versions.ForwardedPort) error
	PortIsPublic(ctx context.Context, id string, port int) (tenant string, public bool, err error)
	GetInstance(ctx context.Context, tenant, id string) (versions.Instance, error)
}

// Runtime tells the task of an instance (its pid: its network namespace),
// and runs the agent's helpers inside gVisor instances (sandbox.go).
type Runtime interface {
	Status(ctx context.Context, id string) (runtime.Status, error)
	Exec(ctx context.Context, id string, spec runtime.ExecSpec) (int, error)
}

// Instances authorizes an instance for a principal and records activity
// on it (lifecycle.Manager).
type Instances interface {
	// GetInstance returns instance id of p's tenant, or ErrNotFound.
	GetInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error)
	// Touch records activity on instance id now.
	Touch(id string)
}

// Deps is what New needs. Threads, when set, refuses new work while the
// process runs too many OS threads (envd's thread high-water mark).
type Deps struct {
	Node      string // this node's name
	Store     Store
	Runtime   Runtime
	Instances Instances
	Dials     DialLimits
	Threads   func() error
}

// Ports serves the port proxy's core (api.PortCore, but for the wake,
// touch and hold of instances, which are lifecycle's).
type Ports struct {
	node      string
	store     Store
	rt        Runtime
	instances Instances
	limits    DialLimits
	threads   func() error

	mu  sync.Mutex
	key []byte // the cluster's preview key, read (or made) once

	dialsOnce sync.Once
	dials     *limiter.Limiter // dials to instances' ports being opened
}

// New makes the port part.
func New(d Deps) *Ports {
	if d.Threads == nil {
		d.Threads = func() error { return nil }
	}
	return &Ports{node: d.Node, store: d.Store, rt: d.Runtime, instances: d.Instances, limits: d.Dials, threads: d.Threads}
}

// previewKey returns the cluster's preview key; the first node that needs
// one stores a random key, every node then reads that one.
func (pt *Ports) previewKey(ctx context.Context) ([]byte, error) {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	if pt.key != nil {
		return pt.key, nil
	}
	candidate := make([]byte, preview.KeySize)
	if _, err := rand.Read(candidate); err != nil {
		return nil, err
	}
	key, err := pt.store.PreviewKey(ctx, candidate)
	if err != nil {
		return nil, err
	}
	pt.key = key
	return key, nil
}

func checkPort(port int) error {
	if port < 1 || port > 65535 {
		return fmt.Errorf("port %d: must be from 1 to 65535: %w", port, errdefs.ErrInvalidArgument)
	}
	return nil
}

// ListPorts returns the TCP ports a running instance listens on, from its
// network namespace, each address once, ordered by port. Public is set
// from the project's settings. Errors as DialInstance's, but for the port.
func (pt *Ports) ListPorts(ctx context.Context, p types.Principal, id string) ([]types.ListeningPort, error) {
	in, st, err := pt.instancePid(ctx, p, id)
	if err != nil {
		return nil, err
	}
	var ls []netns.Listener
	if st.Class == runtime.ClassGVisor {
		ls, err = pt.listSandbox(ctx, id)
	} else {
		ls, err = netns.Listening(int(st.Pid))
	}
	if err != nil {
		return nil, fmt.Errorf("ports of instance %q: %w", id, err)
	}
	public, err := pt.store.PublicPorts(ctx, p.Tenant, in.Project)
	if err != nil {
		return nil, err
	}
	fwd, err := pt.store.ForwardedPorts(ctx, p.Tenant, in.Project)
	if err != nil {
		return nil, err
	}
	out := []types.ListeningPort{}
	for _, l := range ls {
		lp := types.ListeningPort{Address: l.Address, Port: l.Port, Protocol: l.Protocol, Public: slices.Contains(public, l.Port)}
		if i := slices.IndexFunc(fwd, func(f versions.ForwardedPort) bool { return f.Port == l.Port }); i >= 0 {
			lp.Forwarded, lp.Label, lp.Scheme = true, fwd[i].Label, fwd[i].Scheme
		}
		if !slices.Contains(out, lp) {
			out = append(out, lp)
		}
	}
	slices.SortStableFunc(out, func(a, b types.ListeningPort) int { return a.Port - b.Port })
	return out, nil
}

// PreviewToken makes a token that opens the preview (host form) of port of
// instance id for req.TTL (default DefaultPreviewTTL, at most
// MaxPreviewTTL). The instance need not be running: the preview wakes it.
// The URL and Host of the answer are the API's to fill (it knows the
// preview domain). Errors: ErrInvalidArgument (port, ttl), ErrNotFound.
func (pt *Ports) PreviewToken(ctx context.Context, p types.Principal, id string, port int, req types.PreviewTokenRequest) (types.PreviewToken, error) {
	if err := checkPort(port); err != nil {
		return types.PreviewToken{}, err
	}
	ttl := DefaultPreviewTTL
	if req.TTL != "" {
		d, err := time.ParseDuration(req.TTL)
		if err != nil || d <= 0 || d > MaxPreviewTTL {
			return types.PreviewToken{}, fmt.Errorf("ttl %q: must be a positive Go duration of at most %v: %w", req.TTL, MaxPreviewTTL, errdefs.ErrInvalidArgument)
		}
		ttl = d
	}
	if _, err := pt.instances.GetInstance(ctx, p, id); err != nil {
		return types.PreviewToken{}, err
	}
	key, err := pt.previewKey(ctx)
	if err != nil {
		return types.PreviewToken{}, err
	}
	// Whole seconds, rounded up: the token carries Unix seconds.
	exp := time.Now().Add(ttl).Truncate(time.Second).Add(time.Second).UTC()
	token := preview.Sign(key, preview.Claims{Instance: id, Port: port, Tenant: p.Tenant, Expires: exp})
	return types.PreviewToken{Token: token, ExpiresAt: exp}, nil
}

// PreviewAccess decides a request of the host form for port of instance
// id: token (from the URL or the cookie, "" = none) must be a valid
// preview token of that port, or the port public in the instance's
// project. It returns the principal to act as (the instance's tenant) and
// the token's expiry (zero for a public port). Every refusal, an unknown
// instance included, is ErrUnauthenticated, so the answer tells nothing
// about instances the caller holds no token for.
func (pt *Ports) PreviewAccess(ctx context.Context, id string, port int, token string) (types.Principal, time.Time, error) {
	deny := func(why string) (types.Principal, time.Time, error) {
		return types.Principal{}, time.Time{}, fmt.Errorf("port %d of instance %q: %s: %w", port, id, why, errdefs.ErrUnauthenticated)
	}
	if names.ValidateInstanceID(id) != nil || checkPort(port) != nil {
		return deny("no such preview")
	}
	tenant, public, err := pt.store.PortIsPublic(ctx, id, port)
	if errors.Is(err, errdefs.ErrNotFound) {
		return deny("no valid preview token")
	}
	if err != nil {
		return types.Principal{}, time.Time{}, err
	}
	var verr error
	if token != "" {
		key, err := pt.previewKey(ctx)
		if err != nil {
			return types.Principal{}, time.Time{}, err
		}
		exp, err := preview.Verify(key, token, id, port, tenant, time.Now())
		if err == nil {
			return types.Principal{Tenant: tenant}, exp, nil
		}
		verr = err
	}
	if public {
		return types.Principal{Tenant: tenant}, time.Time{}, nil
	}
	if verr != nil {
		return types.Principal{}, time.Time{}, fmt.Errorf("port %d of instance %q: %w", port, id, verr)
	}
	return deny("a preview token is required (POST /v1/instances/{i}/ports/{port}/token)")
}

// GetProjectPorts returns a project's port settings.
func (pt *Ports) GetProjectPorts(ctx context.Context, p types.Principal, project string) (types.ProjectPorts, error) {
	ports, err := pt.store.PublicPorts(ctx, p.Tenant, project)
	if err != nil {
		return types.ProjectPorts{}, err
	}
	fwd, err := pt.store.ForwardedPorts(ctx, p.Tenant, project)
	if err != nil {
		return types.ProjectPorts{}, err
	}
	return types.ProjectPorts{Public: ports, Forwarded: forwardedOut(fwd)}, nil
}

func forwardedOut(fwd []versions.ForwardedPort) []types.ForwardedPort {
	out := make([]types.ForwardedPort, len(fwd))
	for i, f := range fwd {
		out[i] = types.ForwardedPort{Port: f.Port, Label: f.Label, Scheme: f.Scheme}
	}
	return out
}

// SetProjectPorts replaces a project's port settings; the list of public
// ports is kept sorted and without duplicates. Forwarded ports are
// replaced when req has a list (nil keeps them); a port given twice there
// is invalid. It applies at once to the project's running instances.
func (pt *Ports) SetProjectPorts(ctx context.Context, p types.Principal, project string, req types.ProjectPorts) (types.ProjectPorts, error) {
	ports := slices.Clone(req.Public)
	if len(ports) > maxPublicPorts {
		return types.ProjectPorts{}, fmt.Errorf("public ports: %d given, at most %d: %w", len(ports), maxPublicPorts, errdefs.ErrInvalidArgument)
	}
	for _, port := range ports {
		if err := checkPort(port); err != nil {
			return types.ProjectPorts{}, fmt.Errorf("public ports: %w", err)
		}
	}
	slices.Sort(ports)
	ports = slices.Compact(ports)
	if ports == nil {
		ports = []int{}
	}
	var fwd []versions.ForwardedPort
	if req.Forwarded != nil {
		if len(req.Forwarded) > maxPublicPorts {
			return types.ProjectPorts{}, fmt.Errorf("forwarded ports: %d given, at most %d: %w", len(req.Forwarded), maxPublicPorts, errdefs.ErrInvalidArgument)
		}
		fwd = []versions.ForwardedPort{}
		for _, f := range req.Forwarded {
			if err := checkPort(f.Port); err != nil {
				return types.ProjectPorts{}, fmt.Errorf("forwarded ports: %w", err)
			}
			if slices.ContainsFunc(fwd, func(g versions.ForwardedPort) bool { return g.Port == f.Port }) {
				return types.ProjectPorts{}, fmt.Errorf("forwarded ports: port %d given twice: %w", f.Port, errdefs.ErrInvalidArgument)
			}
			if len(f.Label) > 128 || strings.ContainsAny(f.Label, "\n\r\x00") {
				return types.ProjectPorts{}, fmt.Errorf("forwarded ports: port %d: a label is one line of at most 128 bytes: %w", f.Port, errdefs.ErrInvalidArgument)
			}
			if f.Scheme != "" && f.Scheme != "http" && f.Scheme != "https" {
				return types.ProjectPorts{}, fmt.Errorf("forwarded ports: port %d: scheme %q: http or https: %w", f.Port, f.Scheme, errdefs.ErrInvalidArgument)
			}
			fwd = append(fwd, versions.ForwardedPort{Port: f.Port, Label: f.Label, Scheme: f.Scheme})
		}
		slices.SortFunc(fwd, func(a, b versions.ForwardedPort) int { return a.Port - b.Port })
	}
	if err := pt.store.SetPorts(ctx, p.Tenant, project, ports, fwd); err != nil {
		return types.ProjectPorts{}, err
	}
	return pt.GetProjectPorts(ctx, p, project)
}
