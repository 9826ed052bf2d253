package envd

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/envd-dev/envd/api/errdefs"
	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/names"
	"github.com/envd-dev/envd/envd/preview"
	"github.com/envd-dev/envd/internal/netns"
)

// The port proxy's core: the ports an instance listens on, preview tokens
// (package preview) and the projects' public ports. The proxying itself is
// the API's (api/ports.go), over DialInstance (dial.go).

const (
	// DefaultPreviewTTL is a preview token's lifetime when its request
	// names none; MaxPreviewTTL the longest one given.
	DefaultPreviewTTL = time.Hour
	MaxPreviewTTL     = 7 * 24 * time.Hour
	// maxPublicPorts bounds a project's list of public ports.
	maxPublicPorts = 64
)

// portState is the Service's part for ports: the cluster's preview key,
// read (or made) once from the store.
type portState struct {
	mu  sync.Mutex
	key []byte
}

// previewKey returns the cluster's preview key; the first node that needs
// one stores a random key, every node then reads that one.
func (s *Service) previewKey(ctx context.Context) ([]byte, error) {
	s.ports.mu.Lock()
	defer s.ports.mu.Unlock()
	if s.ports.key != nil {
		return s.ports.key, nil
	}
	candidate := make([]byte, preview.KeySize)
	if _, err := rand.Read(candidate); err != nil {
		return nil, err
	}
	key, err := s.store.Nodes.PreviewKey(ctx, candidate)
	if err != nil {
		return nil, err
	}
	s.ports.key = key
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
func (s *Service) ListPorts(ctx context.Context, p types.Principal, id string) ([]types.ListeningPort, error) {
	in, pid, err := s.instancePid(ctx, p, id)
	if err != nil {
		return nil, err
	}
	ls, err := netns.Listening(int(pid))
	if err != nil {
		return nil, fmt.Errorf("ports of instance %q: %w", id, err)
	}
	public, err := s.store.Projects.PublicPorts(ctx, p.Tenant, in.Project)
	if err != nil {
		return nil, err
	}
	out := []types.ListeningPort{}
	for _, l := range ls {
		lp := types.ListeningPort{Address: l.Address, Port: l.Port, Protocol: l.Protocol, Public: slices.Contains(public, l.Port)}
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
func (s *Service) PreviewToken(ctx context.Context, p types.Principal, id string, port int, req types.PreviewTokenRequest) (types.PreviewToken, error) {
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
	if _, err := s.GetInstance(ctx, p, id); err != nil {
		return types.PreviewToken{}, err
	}
	key, err := s.previewKey(ctx)
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
func (s *Service) PreviewAccess(ctx context.Context, id string, port int, token string) (types.Principal, time.Time, error) {
	deny := func(why string) (types.Principal, time.Time, error) {
		return types.Principal{}, time.Time{}, fmt.Errorf("port %d of instance %q: %s: %w", port, id, why, errdefs.ErrUnauthenticated)
	}
	if names.ValidateInstanceID(id) != nil || checkPort(port) != nil {
		return deny("no such preview")
	}
	tenant, public, err := s.store.Instances.PortIsPublic(ctx, id, port)
	if errors.Is(err, errdefs.ErrNotFound) {
		return deny("no valid preview token")
	}
	if err != nil {
		return types.Principal{}, time.Time{}, err
	}
	var verr error
	if token != "" {
		key, err := s.previewKey(ctx)
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
func (s *Service) GetProjectPorts(ctx context.Context, p types.Principal, project string) (types.ProjectPorts, error) {
	ports, err := s.store.Projects.PublicPorts(ctx, p.Tenant, project)
	if err != nil {
		return types.ProjectPorts{}, err
	}
	return types.ProjectPorts{Public: ports}, nil
}

// SetProjectPorts replaces a project's port settings; the list of public
// ports is kept sorted and without duplicates. It applies at once to the
// project's running instances.
func (s *Service) SetProjectPorts(ctx context.Context, p types.Principal, project string, req types.ProjectPorts) (types.ProjectPorts, error) {
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
	if err := s.store.Projects.SetPublicPorts(ctx, p.Tenant, project, ports); err != nil {
		return types.ProjectPorts{}, err
	}
	return types.ProjectPorts{Public: ports}, nil
}
