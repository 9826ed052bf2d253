package snapshotter

import (
	"archive/tar"
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/envd-dev/envd/errdefs"
)

// IDShift maps the host ids of a user namespace instance's upper dir back to
// the container's: host id HostBase+n is container id n, for n < Size. A
// layer records the container's ids, so it restores the same with or
// without a user namespace.
type IDShift struct {
	HostBase uint32
	Size     uint32
}

// back maps a host id to the container's; an id outside the range cannot be
// recorded faithfully and fails the save.
func (m *IDShift) back(id uint32, kind, full string) (uint32, error) {
	if id < m.HostBase || id-m.HostBase >= m.Size {
		return 0, fmt.Errorf("%q has host %s %d, outside the instance's user namespace range %d-%d: %w",
			full, kind, id, m.HostBase, m.HostBase+m.Size-1, errdefs.ErrFailedPrecondition)
	}
	return id - m.HostBase, nil
}

const (
	xattrPAX         = "SCHILY.xattr."
	vfsCapRevMask    = 0xFF000000
	vfsCapRev2       = 0x02000000
	vfsCapRev3       = 0x03000000
	vfsCapV2Size     = 20
	vfsCapV3Size     = 24
	aclXattrVersion  = 2
	aclTagUser       = 0x02
	aclTagGroup      = 0x08
	aclHeaderSize    = 4
	aclEntrySize     = 8
	aclAccessXattr   = "system.posix_acl_access"
	aclDefaultXattr  = "system.posix_acl_default"
	capabilityXattr  = "security.capability"
	capEffectiveFlag = 0x000001
)

// header shifts h's owner and the ids inside its xattrs: a file capability
// written in the namespace (v3, with the namespace's root as host id) and
// POSIX ACL entries naming users or groups (stored as host ids). A nil m
// changes nothing.
func (m *IDShift) header(h *tar.Header, full string) error {
	if m == nil {
		return nil
	}
	uid, err := m.back(uint32(h.Uid), "uid", full)
	if err != nil {
		return err
	}
	gid, err := m.back(uint32(h.Gid), "gid", full)
	if err != nil {
		return err
	}
	h.Uid, h.Gid = int(uid), int(gid)
	for k, v := range h.PAXRecords {
		name, ok := strings.CutPrefix(k, xattrPAX)
		if !ok {
			continue
		}
		var nv string
		switch name {
		case capabilityXattr:
			nv, err = m.capability(v, full)
		case aclAccessXattr, aclDefaultXattr:
			nv, err = m.acl(v, full)
		default:
			continue
		}
		if err != nil {
			return err
		}
		h.PAXRecords[k] = nv
	}
	return nil
}

// capability turns a v3 file capability whose root id is the namespace's
// root into the v2 form (valid for whichever root runs it); another root id
// is shifted and kept v3. v2 values are kept.
func (m *IDShift) capability(v, full string) (string, error) {
	b := []byte(v)
	if len(b) < 4 || binary.LittleEndian.Uint32(b)&vfsCapRevMask != vfsCapRev3 {
		return v, nil
	}
	if len(b) != vfsCapV3Size {
		return "", fmt.Errorf("%q: %s of %d bytes: %w", full, capabilityXattr, len(b), errdefs.ErrFailedPrecondition)
	}
	root, err := m.back(binary.LittleEndian.Uint32(b[vfsCapV2Size:]), "capability root id", full)
	if err != nil {
		return "", err
	}
	if root != 0 {
		binary.LittleEndian.PutUint32(b[vfsCapV2Size:], root)
		return string(b), nil
	}
	out := append([]byte(nil), b[:vfsCapV2Size]...)
	binary.LittleEndian.PutUint32(out, vfsCapRev2|binary.LittleEndian.Uint32(b)&capEffectiveFlag)
	return string(out), nil
}

// acl shifts the ids of ACL_USER and ACL_GROUP entries of a POSIX ACL xattr.
func (m *IDShift) acl(v, full string) (string, error) {
	b := []byte(v)
	if len(b) < aclHeaderSize || (len(b)-aclHeaderSize)%aclEntrySize != 0 || binary.LittleEndian.Uint32(b) != aclXattrVersion {
		return "", fmt.Errorf("%q: malformed POSIX ACL of %d bytes: %w", full, len(b), errdefs.ErrFailedPrecondition)
	}
	for off := aclHeaderSize; off < len(b); off += aclEntrySize {
		tag := binary.LittleEndian.Uint16(b[off:])
		if tag != aclTagUser && tag != aclTagGroup {
			continue
		}
		id, err := m.back(binary.LittleEndian.Uint32(b[off+4:]), "ACL id", full)
		if err != nil {
			return "", err
		}
		binary.LittleEndian.PutUint32(b[off+4:], id)
	}
	return string(b), nil
}
