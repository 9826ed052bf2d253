package builder

import (
	"archive/tar"
	"bytes"
	"crypto/md5"
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
)

func TestCheckSpec(t *testing.T) {
	t.Parallel()
	ctx := "sha256:" + hex.EncodeToString(make([]byte, 32))
	for _, tc := range []struct {
		name string
		req  types.BuildRequest
		ok   bool
	}{
		{"packages only", types.BuildRequest{Manager: Apt, Packages: []string{"tree"}}, true},
		{"files only, no manager", types.BuildRequest{Files: []types.BuildFile{{Path: "/etc/motd", Content: "hi\n"}}}, true},
		{"run only", types.BuildRequest{Run: []types.BuildStep{{Args: []string{"echo", "a;b", "$(x)", "`y`"}}}}, true},
		{"shell step", types.BuildRequest{Run: []types.BuildStep{{Args: []string{"echo $HOME > /x"}, Shell: true}}}, true},
		{"apt sources and keys", types.BuildRequest{Manager: Apt, Packages: []string{"tree"}, Sources: &types.BuildSources{
			Apt:     []types.SourceFile{{Name: "extra.list", Content: "deb http://x bookworm main\n"}, {Name: "/etc/apt/sources.list.d/y.sources"}},
			AptKeys: []types.SourceFile{{Name: "extra.asc", Content: "KEY"}, {Name: "/usr/share/keyrings/k.gpg", ContentBase64: "AAEC"}},
		}}, true},
		{"apk repositories", types.BuildRequest{Manager: Apk, Packages: []string{"jq"}, Sources: &types.BuildSources{Apk: []string{"https://x/edge/community"}}}, true},
		{"context source", types.BuildRequest{Context: ctx, Files: []types.BuildFile{{Path: "/opt/a", Source: "dir/a", Mode: "0755"}}}, true},
		{"env", types.BuildRequest{Env: map[string]string{"LANG": "C.UTF-8", "_X1": "a b"}, Run: []types.BuildStep{{Args: []string{"true"}}}}, true},

		{"nothing to build", types.BuildRequest{}, false},
		{"package with shell characters", types.BuildRequest{Manager: Apt, Packages: []string{"tree; id"}}, false},
		{"unknown manager with packages", types.BuildRequest{Manager: "yum", Packages: []string{"tree"}}, false},
		{"unknown manager without packages", types.BuildRequest{Manager: "yum", Run: []types.BuildStep{{Args: []string{"true"}}}}, false},
		{"relative file", types.BuildRequest{Files: []types.BuildFile{{Path: "etc/motd"}}}, false},
		{"file escaping the root", types.BuildRequest{Files: []types.BuildFile{{Path: "/etc/../../x"}}}, false},
		{"file dot-dot", types.BuildRequest{Files: []types.BuildFile{{Path: "/../x"}}}, false},
		{"the root", types.BuildRequest{Files: []types.BuildFile{{Path: "/"}}}, false},
		{"file in /proc", types.BuildRequest{Files: []types.BuildFile{{Path: "/proc/sys/x"}}}, false},
		{"file in /tmp", types.BuildRequest{Files: []types.BuildFile{{Path: "/tmp/x"}}}, false},
		{"file twice", types.BuildRequest{Files: []types.BuildFile{{Path: "/a"}, {Path: "/a"}}}, false},
		{"two contents", types.BuildRequest{Files: []types.BuildFile{{Path: "/a", Content: "x", ContentBase64: "eA=="}}}, false},
		{"bad base64", types.BuildRequest{Files: []types.BuildFile{{Path: "/a", ContentBase64: "!!"}}}, false},
		{"bad mode", types.BuildRequest{Files: []types.BuildFile{{Path: "/a", Mode: "rwx"}}}, false},
		{"mode too big", types.BuildRequest{Files: []types.BuildFile{{Path: "/a", Mode: "17777"}}}, false},
		{"source without context", types.BuildRequest{Files: []types.BuildFile{{Path: "/a", Source: "a"}}}, false},
		{"source leaving the context", types.BuildRequest{Context: ctx, Files: []types.BuildFile{{Path: "/a", Source: "../a"}}}, false},
		{"absolute source", types.BuildRequest{Context: ctx, Files: []types.BuildFile{{Path: "/a", Source: "/etc/shadow"}}}, false},
		{"bad context", types.BuildRequest{Context: "latest", Files: []types.BuildFile{{Path: "/a"}}}, false},
		{"empty step", types.BuildRequest{Run: []types.BuildStep{{}}}, false},
		{"shell with two strings", types.BuildRequest{Run: []types.BuildStep{{Args: []string{"echo", "x"}, Shell: true}}}, false},
		{"NUL in an argument", types.BuildRequest{Run: []types.BuildStep{{Args: []string{"echo", "a\x00b"}}}}, false},
		{"relative dir", types.BuildRequest{Run: []types.BuildStep{{Args: []string{"true"}, Dir: "src"}}}, false},
		{"env name", types.BuildRequest{Env: map[string]string{"A-B": "x"}, Run: []types.BuildStep{{Args: []string{"true"}}}}, false},
		{"apt sources with apk", types.BuildRequest{Manager: Apk, Packages: []string{"jq"}, Sources: &types.BuildSources{Apt: []types.SourceFile{{Name: "a.list"}}}}, false},
		{"apt source name", types.BuildRequest{Manager: Apt, Packages: []string{"tree"}, Sources: &types.BuildSources{Apt: []types.SourceFile{{Name: "a.txt"}}}}, false},
		{"apt source outside /etc/apt", types.BuildRequest{Manager: Apt, Packages: []string{"tree"}, Sources: &types.BuildSources{Apt: []types.SourceFile{{Name: "/etc/passwd"}}}}, false},
		{"apt source dot-dot", types.BuildRequest{Manager: Apt, Packages: []string{"tree"}, Sources: &types.BuildSources{Apt: []types.SourceFile{{Name: "/etc/apt/../passwd"}}}}, false},
		{"key name with a slash", types.BuildRequest{Manager: Apt, Packages: []string{"tree"}, Sources: &types.BuildSources{AptKeys: []types.SourceFile{{Name: "a/b"}}}}, false},
		{"apk line with a newline", types.BuildRequest{Manager: Apk, Packages: []string{"jq"}, Sources: &types.BuildSources{Apk: []string{"a\nb"}}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckSpec(tc.req)
			if tc.ok {
				assert.NoError(t, err)
			} else {
				assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)
			}
		})
	}
}

func TestPlanOrderAndArgv(t *testing.T) {
	t.Parallel()
	req := types.BuildRequest{
		Manager: Apt, Packages: []string{"tree"},
		Sources: &types.BuildSources{Apt: []types.SourceFile{{Name: "extra.list", Content: "deb x y z\n"}}, AptKeys: []types.SourceFile{{Name: "k.gpg", ContentBase64: "AAEC"}}},
		Files:   []types.BuildFile{{Path: "/etc/motd", Content: "hi\n"}, {Path: "/opt/tool", Source: "./bin/tool", Mode: "0755"}},
		Env:     map[string]string{"B": "2", "A": "1"},
		Run:     []types.BuildStep{{Args: []string{"echo", "$(id)"}}, {Args: []string{"echo $A"}, Shell: true, Dir: "/opt"}},
		Context: "sha256:" + hex.EncodeToString(make([]byte, 32)),
	}
	require.NoError(t, CheckSpec(req))
	var asked []string
	steps, err := Plan(req, func(name string) ([]byte, error) { asked = append(asked, name); return []byte("tool"), nil })
	require.NoError(t, err)
	assert.Equal(t, []string{"bin/tool"}, asked)
	var what []string
	for _, s := range steps {
		w := s.What
		if w == "" {
			w = s.Args[0]
		}
		what = append(what, w)
	}
	assert.Equal(t, []string{"apt key /etc/apt/keyrings/k.gpg", "apt source /etc/apt/sources.list.d/extra.list",
		"apt-get", "apt-get", "apt-get", "sh", "file /etc/motd", "file /opt/tool", "echo", "sh"}, what,
		"sources, packages, files, run")
	assert.Equal(t, []byte{0, 1, 2}, steps[0].Stdin)
	assert.Equal(t, []string{"sh", "-c", writeScript, "sh", "/etc/motd", "0644"}, steps[6].Args, "the path is an argument, not script text")
	assert.Equal(t, []byte("tool"), steps[7].Stdin)
	assert.Equal(t, "0755", steps[7].Args[5])
	assert.Equal(t, []string{"echo", "$(id)"}, steps[8].Args, "argv as given")
	assert.Equal(t, []string{"A=1", "B=2"}, steps[8].Env)
	assert.Equal(t, []string{"sh", "-c", "echo $A"}, steps[9].Args)
	assert.Equal(t, "/opt", steps[9].Dir)
	assert.Contains(t, steps[3].Env, "A=1", "the install sees the env too")
	assert.Contains(t, steps[3].Env, "DEBIAN_FRONTEND=noninteractive")
}

func TestSpecKey(t *testing.T) {
	t.Parallel()
	pk := types.BuildRequest{Manager: Apt, Packages: []string{"tree"}, Validate: [][]string{{"tree", "--version"}}}
	assert.Equal(t, Key("r@1", Apt, pk.Packages, pk.Validate), SpecKey("r@1", pk), "a packages-only spec keeps its old key")
	withFile := pk
	withFile.Files = []types.BuildFile{{Path: "/etc/a", Content: "1"}}
	other := pk
	other.Files = []types.BuildFile{{Path: "/etc/a", Content: "2"}}
	assert.NotEqual(t, SpecKey("r@1", pk), SpecKey("r@1", withFile))
	assert.NotEqual(t, SpecKey("r@1", withFile), SpecKey("r@1", other))
	envA, envB := pk, pk
	envA.Env = map[string]string{"A": "1", "B": "2"}
	envB.Env = map[string]string{"B": "2", "A": "1"}
	assert.Equal(t, SpecKey("r@1", envA), SpecKey("r@1", envB), "map order does not matter")
	withSwitch := withFile
	withSwitch.Switch, withSwitch.From = true, 3
	assert.Equal(t, SpecKey("r@1", withFile), SpecKey("r@1", withSwitch), "switch and from are not the spec")
}

// cfgLayer is an uncompressed layer tar of regular files (content), symlinks
// ("->target") and whiteouts (nil).
func cfgLayer(t *testing.T, entries [][2]any) *bytes.Reader {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		name := e[0].(string)
		switch v := e[1].(type) {
		case nil:
			dir, base := splitPath(name)
			require.NoError(t, tw.WriteHeader(&tar.Header{Name: dir + ".wh." + base, Typeflag: tar.TypeReg}))
		case string:
			if len(v) > 2 && v[:2] == "->" {
				require.NoError(t, tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeSymlink, Linkname: v[2:], Mode: 0o777}))
				continue
			}
			require.NoError(t, tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(v))}))
			_, err := tw.Write([]byte(v))
			require.NoError(t, err)
		case []byte:
			require.NoError(t, tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o600, Size: int64(len(v))}))
			_, err := tw.Write(v)
			require.NoError(t, err)
		}
	}
	require.NoError(t, tw.Close())
	return bytes.NewReader(b.Bytes())
}

func splitPath(p string) (string, string) {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' {
			return p[:i+1], p[i+1:]
		}
	}
	return "", p
}

func TestDeriveFromConfigTrees(t *testing.T) {
	t.Parallel()
	conffile := "# the package's config\n"
	sum := md5.Sum([]byte(conffile))
	status := "Package: tree\nStatus: install ok installed\nVersion: 2.1.0-1\n\n" +
		"Package: nginx-common\nStatus: install ok installed\nVersion: 1.22\nConffiles:\n /etc/nginx/nginx.conf " + hex.EncodeToString(sum[:]) + "\n\n"
	before := ConfigTree{}
	require.NoError(t, before.Apply(cfgLayer(t, [][2]any{
		{"etc/apt/sources.list", "deb http://mirror bookworm main\n"},
		{"etc/hostname", "base\n"},
		{"etc/old.conf", "to delete\n"},
		{"etc/keep.conf", "same\n"},
		{"var/lib/dpkg/status", "Package: base-files\nStatus: install ok installed\nVersion: 12\n\n"},
		{"usr/bin/ignored", "not a config tree\n"},
	})))
	after := before.Clone()
	big := bytes.Repeat([]byte("x"), MaxExportFileBytes+1)
	require.NoError(t, after.Apply(cfgLayer(t, [][2]any{
		{"etc/apt/sources.list.d/extra.list", "deb [signed-by=/etc/apt/keyrings/extra.gpg] http://extra bookworm main\n"},
		{"etc/apt/keyrings/extra.gpg", []byte{0x99, 0x01, 0x00}},
		{"etc/app.conf", "mine\n"},
		{"etc/nginx/nginx.conf", conffile},
		{"etc/big.bin", big},
		{"etc/ld.so.cache", []byte{1, 2}},
		{"etc/alternatives/editor", "->/usr/bin/vim"},
		{"etc/old.conf", nil},
		{"var/lib/dpkg/status", status},
	})))
	assert.NotContains(t, after, "/usr/bin/ignored")
	pkgs := &types.PackageChanges{Manager: "dpkg",
		Added:    []types.Package{{Name: "tree", Version: "2.1.0-1"}, {Name: "nginx-common", Version: "1.22"}},
		Upgraded: []types.PackageUpgrade{{Name: "libc6", From: "2.36-9", To: "2.36-9+deb12u4"}},
		Removed:  []types.Package{{Name: "nano", Version: "7.2"}},
	}
	req, omit := Derive(pkgs, before, after)
	require.NoError(t, CheckSpec(req), "a derived spec is a valid build request")
	assert.Equal(t, Apt, req.Manager)
	assert.Equal(t, []string{"libc6=2.36-9+deb12u4", "nginx-common=1.22", "tree=2.1.0-1"}, req.Packages)
	require.NotNil(t, req.Sources)
	assert.Equal(t, []types.SourceFile{{Name: "/etc/apt/sources.list.d/extra.list", Content: "deb [signed-by=/etc/apt/keyrings/extra.gpg] http://extra bookworm main\n"}}, req.Sources.Apt)
	assert.Equal(t, []types.SourceFile{{Name: "/etc/apt/keyrings/extra.gpg", ContentBase64: "mQEA"}}, req.Sources.AptKeys)
	assert.Equal(t, []types.BuildFile{{Path: "/etc/app.conf", Content: "mine\n", Mode: "0644"}}, req.Files,
		"only the user's file: the conffile the install makes, the cache and the big file are not carried")
	require.Len(t, req.Run, 2)
	assert.Equal(t, []string{"env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "remove", "-y", "--", "nano"}, req.Run[0].Args)
	assert.Equal(t, []string{"rm", "-rf", "--", "/etc/old.conf"}, req.Run[1].Args)
	reasons := map[string]string{}
	for _, o := range omit {
		reasons[o.Path] = o.Reason
	}
	assert.Contains(t, reasons, "/etc/big.bin")
	assert.Contains(t, reasons, "/etc/ld.so.cache")
	assert.Contains(t, reasons, "/etc/alternatives/editor")
	assert.NotContains(t, reasons, "/etc/nginx/nginx.conf")

	// No package changed: sources are plain files and no manager is named.
	req, _ = Derive(nil, before, after)
	assert.Empty(t, req.Manager)
	assert.Nil(t, req.Sources)
	var paths []string
	for _, f := range req.Files {
		paths = append(paths, f.Path)
	}
	assert.Contains(t, paths, "/etc/apt/sources.list.d/extra.list")
	require.NoError(t, CheckSpec(req))
}

func TestDeriveApk(t *testing.T) {
	t.Parallel()
	before := ConfigTree{}
	require.NoError(t, before.Apply(cfgLayer(t, [][2]any{{"etc/apk/repositories", "https://a/main\nhttps://a/community\n"}})))
	after := before.Clone()
	require.NoError(t, after.Apply(cfgLayer(t, [][2]any{
		{"etc/apk/repositories", "https://a/main\nhttps://a/edge/testing\n"},
		{"etc/apk/keys/me.rsa.pub", "-----BEGIN PUBLIC KEY-----\n"},
		{"etc/apk/world", "jq\n"},
	})))
	req, omit := Derive(&types.PackageChanges{Manager: "apk", Added: []types.Package{{Name: "jq", Version: "1.7-r0"}}}, before, after)
	require.NoError(t, CheckSpec(req))
	assert.Equal(t, []string{"jq=1.7-r0"}, req.Packages)
	assert.Equal(t, []string{"https://a/edge/testing"}, req.Sources.Apk)
	assert.Equal(t, "/etc/apk/keys/me.rsa.pub", req.Sources.ApkKeys[0].Name)
	assert.Empty(t, req.Files, "the world file follows from the packages")
	var paths []string
	for _, o := range omit {
		paths = append(paths, o.Path)
	}
	assert.Contains(t, paths, "/etc/apk/repositories", "a removed repository line is reported")
}

func TestPackageChangesReadsTheDatabases(t *testing.T) {
	t.Parallel()
	before, after := ConfigTree{}, ConfigTree{}
	require.NoError(t, before.Apply(cfgLayer(t, [][2]any{{"var/lib/dpkg/status", "a"}})))
	require.NoError(t, after.Apply(cfgLayer(t, [][2]any{{"var/lib/dpkg/status", "b"}})))
	var got [3]string
	cmp := func(m string, b, a []byte) *types.PackageChanges {
		got = [3]string{m, string(b), string(a)}
		return &types.PackageChanges{Manager: m}
	}
	require.NotNil(t, PackageChanges(before, after, cmp))
	assert.Equal(t, [3]string{"dpkg", "a", "b"}, got)
	assert.Nil(t, PackageChanges(before, before.Clone(), cmp), "the same database: no package changed")
	assert.Nil(t, PackageChanges(ConfigTree{}, ConfigTree{}, cmp), "no database")
	apk := ConfigTree{}
	require.NoError(t, apk.Apply(cfgLayer(t, [][2]any{{"lib/apk/db/installed", "P:jq\n"}})))
	require.NotNil(t, PackageChanges(ConfigTree{}, apk, cmp))
	assert.Equal(t, [3]string{"apk", "", "P:jq\n"}, got)
}

// A parent of the configuration trees replaced by a symlink (a merged
// /usr) takes the files below it out of the tree.
func TestConfigTreeParentReplaced(t *testing.T) {
	t.Parallel()
	tr := ConfigTree{}
	require.NoError(t, tr.Apply(cfgLayer(t, [][2]any{{"usr/share/keyrings/k.gpg", "key"}, {"etc/motd", "hi"}})))
	require.Contains(t, tr, "/usr/share/keyrings/k.gpg")
	require.NoError(t, tr.Apply(cfgLayer(t, [][2]any{{"usr/share", "->/opt/share"}})))
	assert.NotContains(t, tr, "/usr/share/keyrings/k.gpg")
	assert.Contains(t, tr, "/etc/motd")
}
