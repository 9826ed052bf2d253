package workspace

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/errdefs"
)

func TestParseSpec(t *testing.T) {
	t.Parallel()
	good := []struct {
		in   string
		want Spec
	}{
		{"work:/workspace", Spec{Name: "work", Path: "/workspace", SizeBytes: DefaultSize}},
		{"tools:/home/dev/.tools:1000:1000:2G", Spec{Name: "tools", Path: "/home/dev/.tools", UID: 1000, GID: 1000, SizeBytes: 2 << 30}},
		{"x:/opt/x", Spec{Name: "x", Path: "/opt/x", SizeBytes: DefaultSize}},
		{"data:/data:512M", Spec{Name: "data", Path: "/data", SizeBytes: 512 << 20}},
		{"data:/data:1:2", Spec{Name: "data", Path: "/data", UID: 1, GID: 2, SizeBytes: DefaultSize}},
		{"a-1:/srv/a:16MiB", Spec{Name: "a-1", Path: "/srv/a", SizeBytes: 16 << 20}},
		{"b:/b:20000000", Spec{Name: "b", Path: "/b", SizeBytes: 20000000}},
		{"usrlike:/usrlocal", Spec{Name: "usrlike", Path: "/usrlocal", SizeBytes: DefaultSize}},
	}
	for _, tc := range good {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseSpec(tc.in)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}

	bad := []struct {
		in, rule string
	}{
		{"w:workspace", "relative"},
		{"w:/workspace/../etc", `".."`},
		{"w:/", "whole image"},
		{"w:/usr/local", "system path /usr"},
		{"w:/usr", "system path /usr"},
		{"w:/etc", "system path /etc"},
		{"w:/var/lib/x", "system path /var"},
		{"w:/proc", "system path /proc"},
		{"w:/run/x", "system path /run"},
		{"w:/lib64/x", "system path /lib64"},
		{"w:/boot", "system path /boot"},
		{"w:/workspace/", "not clean"},
		{"Work:/workspace", "volume name"},
		{"-w:/workspace", "volume name"},
		{"w_x:/workspace", "volume name"},
		{":/workspace", "volume name"},
		{"w:/workspace:10Q", "size"},
		{"w:/workspace:1M", "size"},
		{"w:/workspace:17T", "size"},
		{"w:/workspace:x:0", "uid"},
		{"w:/workspace:0:-1", "gid"},
		{"w", "NAME:PATH"},
		{"w:/a:1:2:3G:x", "NAME:PATH"},
	}
	for _, tc := range bad {
		t.Run(tc.in, func(t *testing.T) {
			_, err := ParseSpec(tc.in)
			require.Error(t, err)
			assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)
			assert.Contains(t, err.Error(), tc.rule)
		})
	}
}

func TestValidatePathAdd(t *testing.T) {
	t.Parallel()
	s := Spec{Name: "tools", Path: "/home/dev/.tools", PathAdd: []string{"/home/dev/.tools/bin", "/home/dev/.tools"}}
	assert.NoError(t, s.Validate())
	for _, p := range []string{"/usr/bin", "bin", "/home/dev/.tools/../x", "/home/dev/.toolsx/bin"} {
		s.PathAdd = []string{p}
		assert.ErrorIs(t, s.Validate(), errdefs.ErrInvalidArgument, p)
	}
	a := Spec{PathAdd: []string{"/w/bin", "/t/bin"}}
	b := Spec{PathAdd: []string{"/t/bin", "/t/sbin"}}
	assert.Equal(t, "/w/bin:/t/bin:/t/sbin:/usr/bin:/bin", PathWith("/usr/bin:/bin:/w/bin", a, b))
}
