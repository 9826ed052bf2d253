package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/envd/node"
	"github.com/envd-dev/envd/errdefs"
)

// readAll reads a file of the instance through the file API.
func readAll(t *testing.T, id, p string, offset, length int64, opts ...client.FileOption) []byte {
	t.Helper()
	r, err := env.c.ReadFile(ctx(t), id, p, offset, length, opts...)
	require.NoError(t, err)
	defer r.Close()
	b, err := io.ReadAll(r)
	require.NoError(t, err)
	return b
}

func requireCode(t *testing.T, err error, code string) {
	t.Helper()
	require.Error(t, err)
	var e *types.Error
	require.True(t, errors.As(err, &e), "%v is not an API error", err)
	assert.Equal(t, code, e.Code, e.Message)
}

// The file API on a running instance: binary round trip, ranges, modes,
// ownership, users, confinement, the tree operations and archives.
func TestRootFilesRoundTrip(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	in := up(t, newProject(t, "files"), 0)

	content := make([]byte, 3<<20+17)
	_, _ = rand.Read(content)
	fi, err := env.c.WriteFile(c, in.ID, "/root/bin/blob", bytes.NewReader(content), client.WithMode(0o751), client.WithMkdir())
	require.NoError(t, err)
	assert.Equal(t, "0751", fi.Mode)
	assert.Equal(t, int64(len(content)), fi.Size)
	assert.Equal(t, content, readAll(t, in.ID, "/root/bin/blob", 0, 0))
	// What the instance sees: the same bytes, the mode, the image's user
	// (root in the fixture) as owner.
	sum := mustSh(t, in.ID, "md5sum /root/bin/blob | cut -d' ' -f1; stat -c '%a %u %g' /root/bin/blob")
	assert.Contains(t, sum, "751 0 0")
	t.Run("ranges", func(t *testing.T) {
		assert.Equal(t, content[1000:2000], readAll(t, in.ID, "/root/bin/blob", 1000, 1000))
		assert.Equal(t, content[len(content)-5:], readAll(t, in.ID, "/root/bin/blob", int64(len(content)-5), 0))
	})
	t.Run("listing", func(t *testing.T) {
		mustSh(t, in.ID, "ln -s blob /root/bin/link && mkdir /root/bin/dir")
		l, err := env.c.ListFiles(c, in.ID, "/root/bin")
		require.NoError(t, err)
		require.Len(t, l.Entries, 3)
		assert.Equal(t, []string{"blob", "dir", "link"}, []string{l.Entries[0].Name, l.Entries[1].Name, l.Entries[2].Name})
		assert.Equal(t, types.FileTypeDir, l.Entries[1].Type)
		assert.Equal(t, "blob", l.Entries[2].LinkTarget)
		assert.False(t, l.ReadOnly)
	})
	t.Run("as another user", func(t *testing.T) {
		mustSh(t, in.ID, "echo 'dev:x:1000:1000::/home/dev:/bin/sh' >> /etc/passwd && echo 'dev:x:1000:' >> /etc/group && "+
			"mkdir -p /home/dev && chown 1000:1000 /home/dev && chmod 700 /root")
		_, err := env.c.WriteFile(c, in.ID, "/home/dev/notes", strings.NewReader("mine"), client.AsUser("dev"))
		require.NoError(t, err)
		assert.Equal(t, "1000 1000 644", mustSh(t, in.ID, "stat -c '%u %g %a' /home/dev/notes"))
		_, err = env.c.WriteFile(c, in.ID, "/root/x", strings.NewReader("no"), client.AsUser("dev"))
		requireCode(t, err, "permission_denied")
		_, err = env.c.ReadFile(c, in.ID, "/root/bin/blob", 0, 0, client.AsIDs(1000, 1000))
		requireCode(t, err, "permission_denied")
		_, err = env.c.ListFiles(c, in.ID, "/", client.AsUser("nosuchuser"))
		requireCode(t, err, "invalid_argument")
	})
	t.Run("confinement", func(t *testing.T) {
		mustSh(t, in.ID, "ln -s ../../../../../../etc/passwd /tmp/up && ln -s /etc/passwd /tmp/abs && "+
			"ln -s /proc/1/root /tmp/magic && ln -s ../../../../../../../ /tmp/top")
		passwd := mustSh(t, in.ID, "cat /etc/passwd")
		host, err := os.ReadFile("/etc/passwd")
		require.NoError(t, err)
		require.NotEqual(t, strings.TrimSpace(string(host)), passwd)
		for _, p := range []string{"/tmp/up", "/tmp/abs", "/tmp/top/etc/passwd"} {
			assert.Equal(t, passwd, strings.TrimSpace(string(readAll(t, in.ID, p, 0, 0))), p)
		}
		// A /proc magic link is refused: by the resolution (ELOOP, 400) or,
		// first, by the kernel's ptrace check on another process's root
		// (403); never followed.
		_, err = env.c.ReadFile(c, in.ID, "/tmp/magic/etc/hostname", 0, 0)
		require.Error(t, err)
		assert.True(t, errors.Is(err, errdefs.ErrInvalidArgument) || errors.Is(err, errdefs.ErrPermissionDenied), err.Error())
		for _, tc := range []struct{ path, code string }{
			{"/dev/null", "invalid_argument"},
			{"/proc/1/environ", "invalid_argument"},
			{"/etc/../etc/passwd", "invalid_argument"},
			{"etc/passwd", "invalid_argument"},
			{"/nope/x", "not_found"},
		} {
			_, err := env.c.ReadFile(c, in.ID, tc.path, 0, 0)
			requireCode(t, err, tc.code)
		}
		_, err = env.c.WriteFile(c, in.ID, "/nope/x", strings.NewReader(""))
		requireCode(t, err, "not_found")
		assert.Contains(t, err.Error(), `parent directory "/nope"`)
		_, err = env.c.WriteFile(c, in.ID, "/tmp/top/escaped", strings.NewReader("inside"))
		require.NoError(t, err)
		assert.Equal(t, "inside", mustSh(t, in.ID, "cat /escaped"), "a write through a link to ../.. lands in the instance's root")
	})
	t.Run("tree operations", func(t *testing.T) {
		_, err := env.c.MakeDir(c, in.ID, types.FileMkdirRequest{Path: "/srv/a/b", Parents: true, Mode: "0750"})
		require.NoError(t, err)
		_, err = env.c.WriteFile(c, in.ID, "/srv/a/b/f", strings.NewReader("f"))
		require.NoError(t, err)
		_, err = env.c.CopyFile(c, in.ID, types.FileMoveRequest{From: "/srv/a", To: "/srv/c"})
		require.NoError(t, err)
		_, err = env.c.MoveFile(c, in.ID, types.FileMoveRequest{From: "/srv/c/b/f", To: "/srv/g"})
		require.NoError(t, err)
		// An image directory: a rename the overlay refuses (EXDEV) is a copy.
		_, err = env.c.MoveFile(c, in.ID, types.FileMoveRequest{From: "/fixtures/keep", To: "/srv/kept"})
		require.NoError(t, err)
		assert.Equal(t, "750\nfstays\nno", mustSh(t, in.ID, "stat -c %a /srv/a/b; cat /srv/g; cat /srv/kept/untouched; test -e /fixtures/keep && echo yes || echo no"))
		err = env.c.DeleteFile(c, in.ID, "/srv/a")
		requireCode(t, err, "failed_precondition")
		require.NoError(t, env.c.DeleteFile(c, in.ID, "/srv/a", client.Recursive()))
		_, err = env.c.WriteFile(c, in.ID, "/srv", strings.NewReader(""))
		requireCode(t, err, "failed_precondition")
		_, err = env.c.ListFiles(c, in.ID, "/srv/g")
		requireCode(t, err, "failed_precondition")
		assert.Equal(t, "c g kept", mustSh(t, in.ID, "ls /srv | tr '\\n' ' '"))
	})
	t.Run("archives", func(t *testing.T) {
		for _, format := range []string{"tar", "tar.zst"} {
			r, err := env.c.DownloadArchive(c, in.ID, "/fixtures", client.WithFormat(format))
			require.NoError(t, err)
			tarball, err := io.ReadAll(r)
			r.Close()
			require.NoError(t, err)
			res, err := env.c.UploadArchive(c, in.ID, "/copy-"+format, bytes.NewReader(tarball), client.WithMkdir())
			require.NoError(t, err, format)
			assert.Greater(t, res.Entries, 10)
		}
		assert.Equal(t, "base content", mustSh(t, in.ID, "cat /copy-tar/modify-me && diff -r /fixtures /copy-tar.zst >&2"))
		for _, tc := range []struct {
			name string
			hdr  tar.Header
		}{
			{"escape", tar.Header{Typeflag: tar.TypeReg, Name: "../../../evil"}},
			{"device", tar.Header{Typeflag: tar.TypeChar, Name: "null", Devmajor: 1, Devminor: 3}},
			{"hard link out", tar.Header{Typeflag: tar.TypeLink, Name: "h", Linkname: "../../etc/shadow"}},
		} {
			var b bytes.Buffer
			tw := tar.NewWriter(&b)
			require.NoError(t, tw.WriteHeader(&tc.hdr))
			require.NoError(t, tw.Close())
			_, err := env.c.UploadArchive(c, in.ID, "/srv", &b)
			requireCode(t, err, "invalid_argument")
		}
		assert.Equal(t, "no", mustSh(t, in.ID, "test -e /evil -o -e /srv/null && echo yes || echo no"))
	})
}

// A volume's files are served like the rest of the root.
func TestRootFilesVolume(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	in := up(t, volumeProject(t, "filesvol"), 0)
	mustSh(t, in.ID, "echo from-exec > /workspace/a")
	assert.Equal(t, "from-exec\n", string(readAll(t, in.ID, "/workspace/a", 0, 0)))
	_, err := env.c.WriteFile(c, in.ID, "/workspace/b", strings.NewReader("from-api"))
	require.NoError(t, err)
	assert.Equal(t, "from-api", mustSh(t, in.ID, "cat /workspace/b"))
}

// Watch events come in order: create, modify, move, delete.
func TestRootFilesWatch(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	in := up(t, newProject(t, "fileswatch"), 0)
	mustSh(t, in.ID, "mkdir -p /w/sub")
	wctx, cancel := context.WithCancel(c)
	defer cancel()
	var mu sync.Mutex
	var got []types.FileEvent
	first := make(chan struct{}) // closed at the first event
	done := make(chan error, 1)
	go func() {
		done <- env.c.WatchFiles(wctx, in.ID, "/w", func(ev types.FileEvent) error {
			mu.Lock()
			defer mu.Unlock()
			ev.Time = time.Time{}
			if got = append(got, ev); len(got) == 1 {
				close(first)
			}
			return nil
		}, client.Recursive())
	}()
	// The stream is open once a probe file's change comes through it; the
	// probe's own events are left out of what is compared.
	for open := time.After(time.Minute); ; {
		// An append, not a touch: a touch of an existing file changes only
		// its times, which the watch does not report, so a stream that opened
		// after the first touch would never see one.
		mustSh(t, in.ID, "echo x >> /w/probe")
		select {
		case <-first:
		case <-time.After(200 * time.Millisecond):
			continue
		case err := <-done:
			t.Fatalf("the watch ended before its first event: %v", err)
		case <-open:
			t.Fatal("no event of /w/probe in a minute: the watch stream did not open")
		}
		break
	}
	mustSh(t, in.ID, "echo a > /w/sub/f; echo b >> /w/sub/f; mv /w/sub/f /w/g; rm /w/g")
	want := []types.FileEvent{
		{Type: "create", Path: "/w/sub/f"},
		{Type: "modify", Path: "/w/sub/f"},
		{Type: "move", Path: "/w/g", From: "/w/sub/f"},
		{Type: "delete", Path: "/w/g"},
	}
	watched := func() []types.FileEvent {
		mu.Lock()
		defer mu.Unlock()
		var out []types.FileEvent
		for _, ev := range got {
			if ev.Path != "/w/probe" {
				out = append(out, ev)
			}
		}
		return out
	}
	require.Eventually(t, func() bool { return len(watched()) >= len(want) }, 10*time.Second, 50*time.Millisecond)
	assert.Equal(t, want, watched())
	// The stream ends (event: end) when the instance's task goes away.
	_, err := env.c.DeleteInstance(c, in.ID)
	require.NoError(t, err)
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(15 * time.Second):
		t.Fatal("the watch did not end when the instance went away")
	}
}

// A stopped, retained instance is read without starting it; writes need
// it Running.
func TestRootFilesStoppedReadOnly(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	p := volumeProject(t, "filesro")
	in, err := env.c.CreateInstance(c, p, types.CreateInstanceRequest{Retain: true})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = env.c.DeleteInstance(context.Background(), in.ID) })
	mustSh(t, in.ID, "echo kept > /root/kept && rm /fixtures/delete-me && echo vol > /workspace/v")
	_, err = env.c.StopInstance(c, in.ID)
	require.NoError(t, err)

	l, err := env.c.ListFiles(c, in.ID, "/fixtures")
	require.NoError(t, err)
	assert.True(t, l.ReadOnly)
	var names []string
	for _, e := range l.Entries {
		names = append(names, e.Name)
	}
	assert.NotContains(t, names, "delete-me", "the layer's whiteout hides the image's file")
	assert.Contains(t, names, "modify-me")
	assert.Equal(t, "kept\n", string(readAll(t, in.ID, "/root/kept", 0, 0)))
	assert.Equal(t, "vol\n", string(readAll(t, in.ID, "/workspace/v", 0, 0)), "volumes are served too")
	r, err := env.c.DownloadArchive(c, in.ID, "/root")
	require.NoError(t, err)
	_, err = io.Copy(io.Discard, r)
	r.Close()
	require.NoError(t, err)
	got, err := env.c.GetInstance(c, in.ID)
	require.NoError(t, err)
	assert.Equal(t, types.StateStopped, got.State, "reads do not start the instance")

	// A write wakes the instance (WakeInstance); where waking is not
	// possible it is refused as the instance's state.
	_, err = env.c.WriteFile(c, in.ID, "/root/new", strings.NewReader("x"))
	if err != nil {
		requireCode(t, err, "failed_precondition")
	} else {
		got, err := env.c.GetInstance(c, in.ID)
		require.NoError(t, err)
		assert.Equal(t, types.StateRunning, got.State)
	}
}

// envctl cp both ways and envctl ls INSTANCE:PATH.
func TestRootFilesEnvctl(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	in := up(t, newProject(t, "filescp"), 0)
	dir := t.TempDir()
	bin := buildEnvctl(t)
	envctl := func(args ...string) string {
		t.Helper()
		cmd := commandContext(c, bin, args...)
		cmd.Env = append(os.Environ(), "ENVD_URL="+env.node.URL, "ENVD_TOKEN="+env.node.Token)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "envctl %v: %s", args, out)
		return string(out)
	}
	src := filepath.Join(dir, "src")
	require.NoError(t, os.MkdirAll(filepath.Join(src, "pkg"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(src, "pkg", "main.go"), []byte("package main\n"), 0o600))
	require.NoError(t, os.Symlink("pkg/main.go", filepath.Join(src, "link")))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "single"), []byte("one file"), 0o755))

	mustSh(t, in.ID, "mkdir /work")
	envctl("cp", src, in.ID+":/work")
	envctl("cp", filepath.Join(dir, "single"), in.ID+":/work/single")
	assert.Equal(t, "package main\n600\npkg/main.go\n755", mustSh(t, in.ID,
		"cat /work/src/link; stat -c %a /work/src/pkg/main.go; readlink /work/src/link; stat -c %a /work/single"))

	var l types.FileList
	require.NoError(t, json.Unmarshal([]byte(envctl("-o", "json", "ls", in.ID+":/work/src")), &l))
	require.Len(t, l.Entries, 2)
	assert.Equal(t, "link", l.Entries[0].Name)
	assert.Equal(t, "pkg", l.Entries[1].Name)
	assert.Contains(t, envctl("ls", in.ID+":/work"), "src/")
	assert.Contains(t, envctl("ls"), in.ID, "ls without a colon still lists instances")

	back := filepath.Join(dir, "back")
	require.NoError(t, os.Mkdir(back, 0o755))
	envctl("cp", in.ID+":/work/src", back)
	envctl("cp", in.ID+":/etc/passwd", back)
	b, err := os.ReadFile(filepath.Join(back, "src", "link"))
	require.NoError(t, err)
	assert.Equal(t, "package main\n", string(b))
	b, err = os.ReadFile(filepath.Join(back, "passwd"))
	require.NoError(t, err)
	assert.Contains(t, string(b), "root:x:0:0")
}

// volumeProject creates a project with a volume at /workspace.
func volumeProject(t *testing.T, prefix string) string {
	t.Helper()
	name := prefix + "-" + strings.ReplaceAll(time.Now().Format("150405.000000"), ".", "")
	_, err := env.c.CreateProject(ctx(t), types.CreateProjectRequest{Name: name, Base: fixtureBase,
		Volumes: []string{name + "-work:/workspace"}, RuntimeClass: projectClass(t)})
	require.NoError(t, err)
	return name
}

// On a node with user namespaces the file API acts with the mapped ids:
// what it writes as the image's root is root's inside, what it writes as a
// user is that user's, and listings show the instance's ids.
func TestRootFilesUserNS(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	_, cl := startJoiningNode(t, "filesuserns", &node.Config{DefaultTTL: time.Hour, PrefetchWindow: -1, UserNS: true})
	p := "filesuserns-" + strings.ReplaceAll(time.Now().Format("150405.000000"), ".", "")
	_, err := cl.CreateProject(c, types.CreateProjectRequest{Name: p, Base: fixtureBase})
	require.NoError(t, err)
	in, err := cl.CreateInstance(c, p, types.CreateInstanceRequest{})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = cl.DeleteInstance(context.Background(), in.ID) })
	run := func(script string) string {
		t.Helper()
		res, err := cl.Exec(c, in.ID, types.ExecRequest{Args: []string{"/bin/sh", "-c", script}})
		require.NoError(t, err)
		require.Equal(t, 0, res.ExitCode, res.Stderr)
		return strings.TrimSpace(res.Stdout)
	}
	run("mkdir -p /home/u && chown 1000:1000 /home/u && echo secret > /root/s && chmod 600 /root/s")
	_, err = cl.WriteFile(c, in.ID, "/root/by-root", strings.NewReader("r"))
	require.NoError(t, err)
	_, err = cl.WriteFile(c, in.ID, "/home/u/by-user", strings.NewReader("u"), client.AsIDs(1000, 1000))
	require.NoError(t, err)
	_, err = cl.ReadFile(c, in.ID, "/root/s", 0, 0, client.AsIDs(1000, 1000))
	requireCode(t, err, "permission_denied")
	assert.Equal(t, "0:0\n1000:1000", run("stat -c %u:%g /root/by-root /home/u/by-user"))
	l, err := cl.ListFiles(c, in.ID, "/home")
	require.NoError(t, err)
	require.Len(t, l.Entries, 1)
	assert.Equal(t, 1000, l.Entries[0].UID)
	r, err := cl.ReadFile(c, in.ID, "/root/s", 0, 0)
	require.NoError(t, err)
	b, err := io.ReadAll(r)
	r.Close()
	require.NoError(t, err)
	assert.Equal(t, "secret\n", string(b), "the instance's root reads its own files")
}
