package registry

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"syscall"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/envd-dev/envd/errdefs"
)

// Repository and tag grammar of the distribution spec
// (github.com/distribution/reference). envd never puts a host in a repo.
var (
	repoPattern = regexp.MustCompile(`^[a-z0-9]+(?:(?:[._]|__|[-]*)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|[-]*)[a-z0-9]+)*)*$`)
	tagPattern  = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$`)
	// Only sha256 is produced or accepted by envd.
	digestPattern = regexp.MustCompile(`^sha256:[a-f0-9]{64}$`)
)

// maxRepoLen is the distribution limit on a repository name (without host).
const maxRepoLen = 255

func validateRepo(repo string) error {
	if len(repo) > maxRepoLen || !repoPattern.MatchString(repo) {
		return fmt.Errorf("repository %q: not a valid repository name: %w", repo, errdefs.ErrInvalidArgument)
	}
	return nil
}

func validateTag(tag string) error {
	if !tagPattern.MatchString(tag) {
		return fmt.Errorf("tag %q: not a valid tag: %w", tag, errdefs.ErrInvalidArgument)
	}
	return nil
}

func validateDigest(d string) error {
	if !digestPattern.MatchString(d) {
		return fmt.Errorf("digest %q: not a sha256 digest: %w", d, errdefs.ErrInvalidArgument)
	}
	return nil
}

// translate maps an error from go-containerregistry or the network to an
// errdefs kind, keeping the original error in the chain. what names the
// object, e.g. `manifest "envd/projects/p1@sha256:..."`.
func translate(err error, what string) error {
	if err == nil {
		return nil
	}
	if kind := kindOf(err); kind != nil {
		return fmt.Errorf("%s: %w: %w", what, kind, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// kindOf returns the errdefs kind of a registry or network error, nil when
// none fits (the error is then internal).
func kindOf(err error) error {
	for _, k := range []error{
		errdefs.ErrNotFound, errdefs.ErrInvalidArgument, errdefs.ErrUnavailable,
		errdefs.ErrUnauthenticated, errdefs.ErrPermissionDenied,
	} {
		if errors.Is(err, k) {
			return nil // already carries a kind
		}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return nil // callers branch on the context errors themselves
	}

	var terr *transport.Error
	if errors.As(err, &terr) {
		for _, d := range terr.Errors {
			switch d.Code {
			case transport.ManifestUnknownErrorCode, transport.BlobUnknownErrorCode, transport.NameUnknownErrorCode:
				return errdefs.ErrNotFound
			case transport.NameInvalidErrorCode, transport.TagInvalidErrorCode, transport.DigestInvalidErrorCode,
				transport.ManifestInvalidErrorCode, transport.ManifestBlobUnknownErrorCode, transport.SizeInvalidErrorCode:
				return errdefs.ErrInvalidArgument
			case transport.UnauthorizedErrorCode:
				return errdefs.ErrUnauthenticated
			case transport.DeniedErrorCode:
				return errdefs.ErrPermissionDenied
			case transport.UnavailableErrorCode, transport.TooManyRequestsErrorCode:
				return errdefs.ErrUnavailable
			}
		}
		return kindOfStatus(terr.StatusCode)
	}

	// Network failures: refused or reset connections, DNS, timeouts.
	var netErr net.Error
	var opErr *net.OpError
	var dnsErr *net.DNSError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH),
		errors.Is(err, syscall.EPIPE), errors.Is(err, net.ErrClosed):
		return errdefs.ErrUnavailable
	case errors.As(err, &opErr), errors.As(err, &dnsErr):
		return errdefs.ErrUnavailable
	case errors.As(err, &netErr) && netErr.Timeout():
		return errdefs.ErrUnavailable
	}
	return nil
}

func kindOfStatus(status int) error {
	switch status {
	case http.StatusNotFound:
		return errdefs.ErrNotFound
	case http.StatusBadRequest:
		return errdefs.ErrInvalidArgument
	case http.StatusUnauthorized:
		return errdefs.ErrUnauthenticated
	case http.StatusForbidden:
		return errdefs.ErrPermissionDenied
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return errdefs.ErrUnavailable
	}
	return nil
}
