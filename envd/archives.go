package envd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"regexp"
	"time"

	"github.com/envd-dev/envd/api/types"

	"github.com/envd-dev/envd/api/errdefs"
	"github.com/envd-dev/envd/versions"
)

// Volume archives belong to a tenant's project. Their object keys are
// chosen here, never by the client:
//
//	volumes/<tenant>/<project>/<volume>/<name>/<16 hex digits>.tar.zst
//
// and every archive is recorded in the store (versions.Archive). A restore
// resolves the client's name or key through that record, within the
// caller's own project, so a key of another tenant or project is not found,
// and no request can write an object outside its own prefix. A fresh
// random part per archive means a replace never writes over the object a
// concurrent restore reads: the record moves to the new key, the old
// object is deleted after.

// archiveNameRE is the grammar of archive names: one key segment.
var archiveNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

func validateArchiveName(name string) error {
	if !archiveNameRE.MatchString(name) {
		return fmt.Errorf("archive name %q: must be 1-128 letters, digits, dots, dashes or underscores, starting with a letter or digit: %w", name, errdefs.ErrInvalidArgument)
	}
	return nil
}

// archiveKey is a new object key for archive name of a project's volume.
func archiveKey(tenant, project, volume, name string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("volumes/%s/%s/%s/%s/%s.tar.zst", tenant, project, volume, name, hex.EncodeToString(b[:]))
}

// orphanArchiveBatch is how many archives of deleted projects one cleanup
// pass takes.
const orphanArchiveBatch = 100

func toVolumeArchive(a versions.Archive) types.VolumeArchive {
	return types.VolumeArchive{Key: a.Key, Bytes: a.SizeBytes, Files: a.Files, Name: a.Name, Project: a.Project,
		Volume: a.Volume, Node: a.Node, CreatedAt: a.CreatedAt}
}

// ListArchives lists the archives of a project, of one volume or of all
// (volume ""), newest first per volume.
func (s *Service) ListArchives(ctx context.Context, p types.Principal, project, volume string) ([]types.VolumeArchive, error) {
	if err := ValidateName("project", project); err != nil {
		return nil, err
	}
	as, err := s.store.ListArchives(ctx, p.Tenant, project, volume)
	if err != nil {
		return nil, err
	}
	out := make([]types.VolumeArchive, 0, len(as))
	for _, a := range as {
		out = append(out, toVolumeArchive(a))
	}
	return out, nil
}

// DeleteArchive deletes archive name of a project's volume: the record
// first, then the object (a failure there is logged and leaves only an
// unreachable object).
func (s *Service) DeleteArchive(ctx context.Context, p types.Principal, project, volume, name string) (types.VolumeArchive, error) {
	if err := ValidateName("project", project); err != nil {
		return types.VolumeArchive{}, err
	}
	a, err := s.store.DeleteArchive(ctx, p.Tenant, project, volume, name)
	if err != nil {
		return types.VolumeArchive{}, err
	}
	s.deleteArchiveObject(ctx, a.Key)
	return toVolumeArchive(a), nil
}

// deleteArchiveObject deletes an object no record points to any more,
// also after ctx is canceled; a failure is logged.
func (s *Service) deleteArchiveObject(ctx context.Context, key string) {
	if s.cfg.Objects == nil {
		s.log.Warn("archive object left: this node has no object storage", "key", key)
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := s.cfg.Objects.Delete(cctx, key); err != nil {
		s.log.Warn("delete archive object", "key", key, "err", err)
	}
}

// deleteOrphanArchives deletes the objects of archives whose project was
// deleted, then their records. A record whose object could not be deleted
// stays, so a later pass (the next project deletion) tries again.
func (s *Service) deleteOrphanArchives(ctx context.Context) {
	if s.cfg.Objects == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
	defer cancel()
	as, err := s.store.OrphanArchives(ctx, orphanArchiveBatch)
	if err != nil {
		s.log.Warn("list archives of deleted projects", "err", err)
		return
	}
	for _, a := range as {
		if err := s.cfg.Objects.Delete(ctx, a.Key); err != nil {
			s.log.Warn("delete archive of deleted project", "project", a.Project, "key", a.Key, "err", err)
			continue
		}
		if err := s.store.ForgetArchive(ctx, a.ID); err != nil {
			s.log.Warn("forget archive of deleted project", "project", a.Project, "key", a.Key, "err", err)
		}
	}
}
