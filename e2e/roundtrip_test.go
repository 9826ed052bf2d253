package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// A change made inside an instance, and what a new instance restored from
// the saved version must show. Checks run inside the new instance.
var roundTripCases = []struct {
	name, change, check string
}{
	{"add file", `echo added > /data/added`, `[ "$(cat /data/added)" = added ]`},
	{"modify base file", `echo changed > /fixtures/modify-me`, `[ "$(cat /fixtures/modify-me)" = changed ]`},
	{"delete base file", `rm /fixtures/delete-me`, `[ ! -e /fixtures/delete-me ]`},
	{"delete base directory", `rm -rf /fixtures/deldir`, `[ ! -e /fixtures/deldir ]`},
	{"replace file by directory", `rm /fixtures/file-to-dir && mkdir /fixtures/file-to-dir && echo in > /fixtures/file-to-dir/in`,
		`[ -d /fixtures/file-to-dir ] && [ "$(cat /fixtures/file-to-dir/in)" = in ]`},
	{"replace directory by file", `rm -rf /fixtures/dir-to-file && echo now-file > /fixtures/dir-to-file`,
		`[ -f /fixtures/dir-to-file ] && [ "$(cat /fixtures/dir-to-file)" = now-file ]`},
	{"opaque directory", `rm -rf /fixtures/opaque && mkdir /fixtures/opaque && echo new > /fixtures/opaque/new`,
		`[ "$(ls -A /fixtures/opaque)" = new ] && [ "$(cat /fixtures/opaque/new)" = new ]`},
	{"symlinks", `ln -s /fixtures/link-target /data/abs-link && ln -s ../fixtures/link-target /data/rel-link && ln -s /nonexistent /data/dangling && rm /fixtures/replace-by-symlink && ln -s link-target /fixtures/replace-by-symlink`,
		`[ "$(readlink /data/abs-link)" = /fixtures/link-target ] && [ "$(cat /data/rel-link)" = target ] && [ "$(readlink /data/dangling)" = /nonexistent ] && [ ! -e /data/dangling ] && [ "$(readlink /fixtures/replace-by-symlink)" = link-target ]`},
	{"hardlinks", `echo hl > /data/h1 && ln /data/h1 /data/h2`,
		`[ "$(stat -c %i /data/h1)" = "$(stat -c %i /data/h2)" ] && [ "$(stat -c %h /data/h1)" = 2 ] && [ "$(cat /data/h2)" = hl ]`},
	{"empty file", `: > /data/empty`, `[ -f /data/empty ] && [ ! -s /data/empty ]`},
	{"file over 100 MB", `dd if=/dev/urandom of=/data/big bs=1M count=110 2>/dev/null && md5sum /data/big > /data/big.md5`,
		`md5sum -c -s /data/big.md5 && [ "$(stat -c %s /data/big)" = 115343360 ]`},
	{"permissions", `chmod 0700 /fixtures/chmod-me && echo x > /data/suid && chmod 4755 /data/suid`,
		`[ "$(stat -c %a /fixtures/chmod-me)" = 700 ] && [ "$(stat -c %a /data/suid)" = 4755 ]`},
	{"ownership", `echo o > /data/owned && chown 1234:5678 /data/owned`, `[ "$(stat -c %u:%g /data/owned)" = 1234:5678 ]`},
	// Instances have no CAP_MKNOD: a device node cannot be made, so none is
	// saved (the snapshotter's own round-trip suite covers device entries).
	{fifoCase, `! mknod /data/null c 1 3 2>/dev/null && mkfifo /data/fifo`,
		`[ ! -e /data/null ] && [ -p /data/fifo ]`},
	{"untouched base file", `true`, `[ "$(cat /fixtures/keep/untouched)" = stays ]`},
	{"excluded paths are not saved", `echo t > /tmp/scratch && mkdir -p /cache && echo c > /cache/f`,
		`[ ! -e /tmp/scratch ] && [ ! -e /cache ]`},
}

// fifoCase is the case whose FIFO a gVisor instance cannot save.
const fifoCase = "fifo nodes, device nodes refused"

// notSavedPaths are the paths the not_saved events of operation opID name.
func notSavedPaths(t *testing.T, opID string) []string {
	t.Helper()
	evs, err := env.c.OperationEvents(ctx(t), opID, 0)
	require.NoError(t, err)
	var out []string
	for _, e := range evs {
		if e.Type != "not_saved" {
			continue
		}
		var d struct {
			Paths  []string `json:"paths"`
			Reason string   `json:"reason"`
		}
		require.NoError(t, json.Unmarshal(e.Data, &d), "event %s", e.Data)
		assert.Equal(t, "gvisor_fifo", d.Reason, e.Message)
		assert.NotEmpty(t, d.Paths, "a not_saved event without paths: %s", e.Message)
		out = append(out, d.Paths...)
	}
	return out
}

func TestRootSaveRestoreRoundTrip(t *testing.T) {
	t.Parallel()
	p := newProject(t, "roundtrip", "/cache")
	a := up(t, p, 0)
	mustSh(t, a.ID, "mkdir -p /data")
	for _, tc := range roundTripCases {
		res := sh(t, a.ID, "set -e; "+tc.change)
		require.Equalf(t, 0, res.ExitCode, "change %q: %s", tc.name, res.Stderr)
	}
	// Extended attributes: busybox has no setfattr, so they are set through
	// the instance's own root (/proc/PID/root goes through its overlay, as
	// a write inside it would).
	xattrFile := instanceRoot(t, a.ID) + "/data/xattr-file"
	require.NoError(t, os.WriteFile(xattrFile, []byte("x"), 0o644))
	require.NoError(t, unix.Setxattr(xattrFile, "user.envd.note", []byte("kept across save"), 0))

	op, res := save(t, a.ID, "round trip")
	assert.True(t, res.Current, "the save must become current")
	assert.False(t, res.Conflict)
	assert.Equal(t, 2, res.Version)
	assert.NotEmpty(t, op.ID)
	// On gVisor a FIFO made inside lives in the sandbox's memory, never in
	// the writable layer: the save says so, naming it, and it is not in
	// the version; on runc it is saved and no such event comes.
	gvisor := projectClass(t) == "gvisor"
	notSaved := notSavedPaths(t, op.ID)
	if gvisor {
		assert.Equal(t, []string{"/data/fifo"}, notSaved, "the save names the FIFO it could not keep")
	} else {
		assert.Empty(t, notSaved, "a runc save leaves nothing out")
	}

	// The new instance starts from the new current version.
	b := up(t, p, 0)
	require.Equal(t, 2, b.Version)
	for _, tc := range roundTripCases {
		t.Run(tc.name, func(t *testing.T) {
			if gvisor && tc.name == fifoCase {
				tc.check = `[ ! -e /data/null ] && [ ! -e /data/fifo ]`
			}
			r := sh(t, b.ID, tc.check)
			assert.Equalf(t, 0, r.ExitCode, "check %q failed in the restored instance: stdout %q stderr %q", tc.check, r.Stdout, r.Stderr)
		})
	}

	t.Run("user xattrs", func(t *testing.T) {
		buf := make([]byte, 64)
		n, err := unix.Getxattr(instanceRoot(t, b.ID)+"/data/xattr-file", "user.envd.note", buf)
		require.NoError(t, err)
		assert.Equal(t, "kept across save", string(buf[:n]))
	})

	// Version 1 still has the base as it was.
	c := up(t, p, 1)
	mustSh(t, c.ID, `[ -e /fixtures/delete-me ] && [ "$(cat /fixtures/modify-me)" = "base content" ] && [ ! -e /data ]`)
}

// instanceRoot is the instance's root filesystem as seen from the host,
// through its init process.
func instanceRoot(t *testing.T, id string) string {
	t.Helper()
	st, err := env.node.Runtime().Status(ctx(t), id)
	require.NoError(t, err)
	require.NotZero(t, st.RootPid)
	return fmt.Sprintf("/proc/%d/root", st.RootPid)
}
