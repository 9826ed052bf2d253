package workspace

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/names"
	"github.com/envd-dev/envd/errdefs"
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

// viewArchive is an archive as the API answers it.
func viewArchive(a versions.Archive) types.VolumeArchive {
	return types.VolumeArchive{Key: a.Key, Bytes: a.SizeBytes, Files: a.Files, Name: a.Name, Project: a.Project,
		Volume: a.Volume, Node: a.Node, CreatedAt: a.CreatedAt}
}

// ListArchives lists the archives of a project, of one volume or of all
// (volume ""), newest first per volume.
func (m *Volumes) ListArchives(ctx context.Context, p types.Principal, project, volume string) ([]types.VolumeArchive, error) {
	if err := names.Validate("project", project); err != nil {
		return nil, err
	}
	as, err := m.store.ListArchives(ctx, p.Tenant, project, volume)
	if err != nil {
		return nil, err
	}
	out := make([]types.VolumeArchive, 0, len(as))
	for _, a := range as {
		out = append(out, viewArchive(a))
	}
	return out, nil
}

// DeleteArchive deletes archive name of a project's volume: the record
// first, then the object (a failure there is logged and leaves only an
// unreachable object).
func (m *Volumes) DeleteArchive(ctx context.Context, p types.Principal, project, volume, name string) (types.VolumeArchive, error) {
	if err := names.Validate("project", project); err != nil {
		return types.VolumeArchive{}, err
	}
	a, err := m.store.DeleteArchive(ctx, p.Tenant, project, volume, name)
	if err != nil {
		return types.VolumeArchive{}, err
	}
	m.deleteArchiveObject(ctx, a.Key)
	return viewArchive(a), nil
}

// deleteArchiveObject deletes an object no record points to any more,
// also after ctx is canceled; a failure is logged.
func (m *Volumes) deleteArchiveObject(ctx context.Context, key string) {
	if m.objects == nil {
		m.log.Warn("archive object left: this node has no object storage", "key", key)
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := m.objects.Delete(cctx, key); err != nil {
		m.log.Warn("delete archive object", "key", key, "err", err)
	}
}

// DeleteOrphanArchives deletes the objects of archives whose project was
// deleted, then their records. A record whose object could not be deleted
// stays, so a later pass (the next project deletion) tries again.
func (m *Volumes) DeleteOrphanArchives(ctx context.Context) {
	if m.objects == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
	defer cancel()
	as, err := m.store.OrphanArchives(ctx, orphanArchiveBatch)
	if err != nil {
		m.log.Warn("list archives of deleted projects", "err", err)
		return
	}
	for _, a := range as {
		if err := m.objects.Delete(ctx, a.Key); err != nil {
			m.log.Warn("delete archive of deleted project", "project", a.Project, "key", a.Key, "err", err)
			continue
		}
		if err := m.store.ForgetArchive(ctx, a.ID); err != nil {
			m.log.Warn("forget archive of deleted project", "project", a.Project, "key", a.Key, "err", err)
		}
	}
}

// Archive copies a volume's content to object storage under a key
// chosen here (see the top of this file) and records it, so that it can be restored
// on another node. The object is written first and recorded last: a
// failure leaves no record, and the new object is deleted.
func (m *Volumes) Archive(ctx context.Context, p types.Principal, project, name string, req types.VolumeArchiveRequest) (types.VolumeArchive, error) {
	if req.Key != "" {
		return types.VolumeArchive{}, fmt.Errorf("key %q: archive keys are chosen by the server; name the archive with name: %w", req.Key, errdefs.ErrInvalidArgument)
	}
	arcName := req.Name
	if arcName == "" {
		arcName = time.Now().UTC().Format("20060102T150405.000Z")
	}
	if err := validateArchiveName(arcName); err != nil {
		return types.VolumeArchive{}, err
	}
	v, err := m.volume(ctx, p, project, name)
	if err != nil {
		return types.VolumeArchive{}, err
	}
	// Refuse before the upload what the record would refuse after it.
	if !req.Replace {
		if _, err := m.store.GetArchive(ctx, p.Tenant, project, name, arcName); err == nil {
			return types.VolumeArchive{}, fmt.Errorf("archive %q of volume %q exists: archive under another name, or replace it (\"replace\": true, envctl --replace): %w", arcName, name, errdefs.ErrAlreadyExists)
		} else if !errors.Is(err, errdefs.ErrNotFound) {
			return types.VolumeArchive{}, err
		}
	}
	key := archiveKey(p.Tenant, project, name, arcName)
	info, err := m.storage.Archive(ctx, owner(p.Tenant, project), toSpec(v), m.objects, key)
	if err != nil {
		return types.VolumeArchive{}, fmt.Errorf("archive volume %q: %w", name, err)
	}
	rec, replaced, err := m.store.PutArchive(ctx, versions.Archive{Tenant: p.Tenant, Project: project, Volume: name,
		Name: arcName, Key: key, SizeBytes: info.Bytes, Files: info.Files, Node: m.node}, req.Replace)
	if err != nil {
		m.deleteArchiveObject(ctx, key)
		return types.VolumeArchive{}, fmt.Errorf("archive volume %q: %w", name, err)
	}
	if replaced != "" {
		m.deleteArchiveObject(ctx, replaced)
	}
	out := viewArchive(rec)
	out.Replaced = replaced != ""
	return out, nil
}

// Restore replaces a volume's content on this node with an archive's,
// found by name among the volume's archives or by key among the project's
// (an archive of another volume of the project may be restored). Keys are
// resolved through the archive records only: any other key, another
// tenant's included, is ErrNotFound. Refused while the project has live
// instances on this node.
func (m *Volumes) Restore(ctx context.Context, p types.Principal, project, name string, req types.VolumeArchiveRequest) (types.Volume, error) {
	if given := btoi(req.Key != "") + btoi(req.Name != "") + btoi(req.Checkpoint != 0); given != 1 {
		return types.Volume{}, fmt.Errorf("give the archive's name, its key or a checkpoint, one of them: %w", errdefs.ErrInvalidArgument)
	}
	if req.Replace {
		return types.Volume{}, fmt.Errorf("replace: only for archive: %w", errdefs.ErrInvalidArgument)
	}
	v, err := m.volume(ctx, p, project, name)
	if err != nil {
		return types.Volume{}, err
	}
	var arc versions.Archive
	if req.Checkpoint != 0 {
		arc, err = m.checkpointArchive(ctx, p.Tenant, project, req.Checkpoint, name)
	} else if req.Name != "" {
		if err := validateArchiveName(req.Name); err != nil {
			return types.Volume{}, err
		}
		arc, err = m.store.GetArchive(ctx, p.Tenant, project, name, req.Name)
	} else {
		arc, err = m.store.GetArchiveByKey(ctx, p.Tenant, project, req.Key)
	}
	if err != nil {
		return types.Volume{}, err
	}
	live, err := m.liveInstances(ctx, p.Tenant, project)
	if err != nil {
		return types.Volume{}, err
	}
	for _, in := range live {
		if in.Node == m.node {
			return types.Volume{}, fmt.Errorf("instance %s of project %q uses the volume on this node: remove it first: %w", in.ID, project, errdefs.ErrFailedPrecondition)
		}
	}
	if err := m.storage.Restore(ctx, owner(p.Tenant, project), toSpec(v), m.objects, arc.Key); err != nil {
		return types.Volume{}, fmt.Errorf("restore volume %q from archive %q: %w", name, arc.Name, err)
	}
	if m.homes != nil {
		// Restored here by hand: this node holds the project's volume data now.
		if err := m.homes.SetVolumeHome(ctx, p.Tenant, project, m.node, ""); err != nil {
			return v, err
		}
	}
	if u, err := m.storage.Usage(ctx, owner(p.Tenant, project), toSpec(v)); err == nil {
		v.UsedBytes, v.SizeBytes = u.UsedBytes, u.SizeBytes
	}
	return v, nil
}
