// Package names is the grammar of the names envd accepts (projects,
// images, tenants, instance and operation ids) and the identifiers it
// derives from them (new ids, registry repositories). It needs nothing.
package names

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/envd-dev/envd/errdefs"
)

// Names of projects and images become registry repository components and
// container IDs, so they follow the stricter of the two grammars.
var nameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// idRE matches the IDs envd gives instances (project name, a dash, 8 hex
// digits) and operations ("op-" and 8 hex digits).
var idRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,70}$`)

// Validate checks a project, image or tenant name; kind names it in the
// error.
func Validate(kind, name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("%s name %q: must be 1-63 lower-case letters, digits or dashes, starting and ending with a letter or digit: %w", kind, name, errdefs.ErrInvalidArgument)
	}
	return nil
}

// ValidateInstanceID checks an instance id given by a client.
func ValidateInstanceID(id string) error {
	if !idRE.MatchString(id) {
		return fmt.Errorf("instance id %q: %w", id, errdefs.ErrInvalidArgument)
	}
	return nil
}

// ValidateOpID checks an operation id given by a client.
func ValidateOpID(id string) error {
	if !idRE.MatchString(id) {
		return fmt.Errorf("operation id %q: %w", id, errdefs.ErrInvalidArgument)
	}
	return nil
}

// NewID is a new id: prefix, a dash and 8 random hex digits.
func NewID(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

// ReposPrefix is the prefix of every repository envd pushes to: project
// repositories (ProjectRepo) and imported images' (ImageRepo).
const ReposPrefix = "envd/"

// ImageRepo is the repository of imported base image name.
func ImageRepo(name string) string { return ReposPrefix + "images/" + name }

// ProjectRepo is the repository of a project's version images.
func ProjectRepo(tenant, project string) string { return ReposPrefix + tenant + "/" + project }

// ValidateExcludes checks a project's exclude list: absolute, clean paths
// that do not climb out of the root.
func ValidateExcludes(paths []string) ([]string, error) {
	out := make([]string, 0, len(paths))
	for _, p := range paths {
		if !strings.HasPrefix(p, "/") {
			return nil, fmt.Errorf("exclude %q: must be an absolute path inside the environment: %w", p, errdefs.ErrInvalidArgument)
		}
		for _, part := range strings.Split(p, "/") {
			if part == ".." {
				return nil, fmt.Errorf("exclude %q: must not contain '..': %w", p, errdefs.ErrInvalidArgument)
			}
		}
		c := path.Clean(p)
		if c == "/" {
			return nil, fmt.Errorf("exclude %q: excluding / would save nothing: %w", p, errdefs.ErrInvalidArgument)
		}
		out = append(out, c)
	}
	return out, nil
}

// ParseTTL turns a requested TTL into an absolute expiry. "" gives def,
// "none" gives no expiry; anything above max is refused.
func ParseTTL(s string, now time.Time, def, max time.Duration) (*time.Time, error) {
	var d time.Duration
	switch s {
	case "":
		d = def
	case "none":
		return nil, nil
	default:
		var err error
		d, err = time.ParseDuration(s)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("ttl %q: must be a positive Go duration (e.g. 30m, 2h) or \"none\": %w", s, errdefs.ErrInvalidArgument)
		}
	}
	if d == 0 {
		return nil, nil
	}
	if max > 0 && d > max {
		return nil, fmt.Errorf("ttl %s: above the maximum %s: %w", d, max, errdefs.ErrInvalidArgument)
	}
	t := now.Add(d).UTC()
	return &t, nil
}
