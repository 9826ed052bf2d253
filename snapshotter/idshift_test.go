package snapshotter

import (
	"archive/tar"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/errdefs"
)

func capV3(magic uint32, perm uint32, root uint32) string {
	b := make([]byte, vfsCapV3Size)
	binary.LittleEndian.PutUint32(b, magic)
	binary.LittleEndian.PutUint32(b[4:], perm)
	binary.LittleEndian.PutUint32(b[20:], root)
	return string(b)
}

func capV2(magic uint32, perm uint32) string {
	b := make([]byte, vfsCapV2Size)
	binary.LittleEndian.PutUint32(b, magic)
	binary.LittleEndian.PutUint32(b[4:], perm)
	return string(b)
}

func aclOf(entries ...[3]uint32) string {
	b := make([]byte, aclHeaderSize, aclHeaderSize+aclEntrySize*len(entries))
	binary.LittleEndian.PutUint32(b, aclXattrVersion)
	for _, e := range entries {
		var x [aclEntrySize]byte
		binary.LittleEndian.PutUint16(x[0:], uint16(e[0]))
		binary.LittleEndian.PutUint16(x[2:], uint16(e[1]))
		binary.LittleEndian.PutUint32(x[4:], e[2])
		b = append(b, x[:]...)
	}
	return string(b)
}

func TestIDShiftHeader(t *testing.T) {
	const base = 100000
	m := &IDShift{HostBase: base, Size: 65536}
	const netRaw = 1 << 13
	for _, tc := range []struct {
		name    string
		in      tar.Header
		want    tar.Header
		wantErr bool
	}{
		{name: "owner", in: tar.Header{Uid: base, Gid: base + 1000}, want: tar.Header{Uid: 0, Gid: 1000}},
		{name: "last id of the range", in: tar.Header{Uid: base + 65535, Gid: base}, want: tar.Header{Uid: 65535, Gid: 0}},
		{name: "uid below the range", in: tar.Header{Uid: 0, Gid: base}, wantErr: true},
		{name: "gid past the range", in: tar.Header{Uid: base, Gid: base + 65536}, wantErr: true},
		{
			name: "v3 capability of the namespace root becomes v2",
			in:   tar.Header{Uid: base, Gid: base, PAXRecords: map[string]string{xattrPAX + capabilityXattr: capV3(vfsCapRev3|capEffectiveFlag, netRaw, base)}},
			want: tar.Header{PAXRecords: map[string]string{xattrPAX + capabilityXattr: capV2(vfsCapRev2|capEffectiveFlag, netRaw)}},
		},
		{
			name: "v3 capability of a nested root keeps v3, shifted",
			in:   tar.Header{Uid: base, Gid: base, PAXRecords: map[string]string{xattrPAX + capabilityXattr: capV3(vfsCapRev3, netRaw, base+1000)}},
			want: tar.Header{PAXRecords: map[string]string{xattrPAX + capabilityXattr: capV3(vfsCapRev3, netRaw, 1000)}},
		},
		{
			name: "v2 capability kept",
			in:   tar.Header{Uid: base, Gid: base, PAXRecords: map[string]string{xattrPAX + capabilityXattr: capV2(vfsCapRev2, netRaw)}},
			want: tar.Header{PAXRecords: map[string]string{xattrPAX + capabilityXattr: capV2(vfsCapRev2, netRaw)}},
		},
		{
			name:    "v3 capability of a host root outside the range",
			in:      tar.Header{Uid: base, Gid: base, PAXRecords: map[string]string{xattrPAX + capabilityXattr: capV3(vfsCapRev3, netRaw, 0)}},
			wantErr: true,
		},
		{
			name: "ACL user and group entries shifted, others kept",
			in: tar.Header{Uid: base, Gid: base, PAXRecords: map[string]string{
				xattrPAX + aclAccessXattr: aclOf([3]uint32{0x01, 7, 0xFFFFFFFF}, [3]uint32{aclTagUser, 6, base + 1000}, [3]uint32{aclTagGroup, 4, base + 50}),
				xattrPAX + "user.note":    "kept",
			}},
			want: tar.Header{PAXRecords: map[string]string{
				xattrPAX + aclAccessXattr: aclOf([3]uint32{0x01, 7, 0xFFFFFFFF}, [3]uint32{aclTagUser, 6, 1000}, [3]uint32{aclTagGroup, 4, 50}),
				xattrPAX + "user.note":    "kept",
			}},
		},
		{
			name:    "malformed ACL",
			in:      tar.Header{Uid: base, Gid: base, PAXRecords: map[string]string{xattrPAX + aclDefaultXattr: "\x02\x00\x00\x00\x01"}},
			wantErr: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.in
			err := m.header(&h, "/upper/f")
			if tc.wantErr {
				require.ErrorIs(t, err, errdefs.ErrFailedPrecondition)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want.Uid, h.Uid)
			assert.Equal(t, tc.want.Gid, h.Gid)
			assert.Equal(t, tc.want.PAXRecords, h.PAXRecords)
		})
	}
	// No shift: nothing changes.
	h := tar.Header{Uid: base, Gid: 7}
	require.NoError(t, (*IDShift)(nil).header(&h, "/upper/f"))
	assert.Equal(t, tar.Header{Uid: base, Gid: 7}, h)
}
