package runtime

import (
	"bufio"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/envd-dev/envd/errdefs"
)

// MinRuncVersion is the first upstream runc release without the leaked
// host fds of CVE-2024-21626 (a process started with cwd /proc/self/fd/N,
// or an image's WorkingDir there, reached the host's filesystem).
const MinRuncVersion = "1.1.12"

// runcCVE names the vulnerability a distribution's changelog must name for
// an older runc build to count as fixed.
const runcCVE = "CVE-2024-21626"

// RuncInfo is the runc a node's shims run.
type RuncInfo struct {
	Path    string // the binary
	Version string // "1.1.5+ds1" from `runc --version`
	Commit  string // its "commit:" line; distributions put their package version there
	// Fixed says the build carries the CVE-2024-21626 fix, and Why how
	// that was decided (or why not).
	Fixed bool
	Why   string
}

// FindRunc is the runc the shims of a containerd started by StartDaemon
// run: the first on the daemon's PATH (binDir, then PATH, then the sbin
// directories; see daemonEnv). binDir "" = findBinDir's.
func FindRunc(binDir string) (string, error) {
	if binDir == "" {
		binDir, _ = findBinDir()
	}
	for _, kv := range daemonEnv(binDir) {
		if p, ok := strings.CutPrefix(kv, "PATH="); ok {
			for _, d := range filepath.SplitList(p) {
				if c := filepath.Join(d, "runc"); d != "" && isExecutable(c) {
					return c, nil
				}
			}
		}
	}
	return "", fmt.Errorf("runc not found on the containerd's PATH: %w", errdefs.ErrUnavailable)
}

// CheckRunc runs `runc --version` of the binary at path and decides
// whether it carries the CVE-2024-21626 fix:
//   - upstream version MinRuncVersion or newer: fixed;
//   - an older version from a distribution package (its "commit:" line is
//     the package version, e.g. Debian 12's "1.1.5+ds1-1+deb12u1"): fixed
//     when the package's changelog (changelogPath, the
//     /usr/share/doc/runc/changelog.Debian.gz Debian and Ubuntu install)
//     has that version as its newest entry, so it describes this build, and
//     names CVE-2024-21626 (a backport);
//   - else not fixed.
//
// An error means runc could not be run or its output read.
func CheckRunc(ctx context.Context, path, changelogPath string) (RuncInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").Output()
	if err != nil {
		return RuncInfo{Path: path}, fmt.Errorf("%s --version: %w", path, err)
	}
	info := parseRuncVersion(string(out))
	info.Path = path
	if info.Version == "" {
		return info, fmt.Errorf("%s --version printed no version: %q", path, strings.TrimSpace(string(out)))
	}
	judgeRunc(&info, changelogPath)
	return info, nil
}

// parseRuncVersion reads the "runc version V" and "commit: C" lines.
func parseRuncVersion(out string) RuncInfo {
	var info RuncInfo
	for line := range strings.SplitSeq(out, "\n") {
		if v, ok := strings.CutPrefix(line, "runc version "); ok {
			info.Version = strings.TrimSpace(v)
		}
		if v, ok := strings.CutPrefix(line, "commit:"); ok {
			info.Commit = strings.TrimSpace(v)
		}
	}
	return info
}

func judgeRunc(info *RuncInfo, changelogPath string) {
	if versionAtLeast(info.Version, MinRuncVersion) {
		info.Fixed, info.Why = true, fmt.Sprintf("version %s is %s or newer", info.Version, MinRuncVersion)
		return
	}
	newest, names, err := changelogOf(changelogPath)
	switch {
	case err != nil:
		info.Why = fmt.Sprintf("version %s is older than %s and no distribution changelog says the fix was backported (%v)", info.Version, MinRuncVersion, err)
	case newest != info.Commit:
		info.Why = fmt.Sprintf("version %s is older than %s; the changelog %s is of package %q, not of this build (%q)", info.Version, MinRuncVersion, changelogPath, newest, info.Commit)
	case !names:
		info.Why = fmt.Sprintf("version %s (package %s) is older than %s and its changelog does not name %s", info.Version, info.Commit, MinRuncVersion, runcCVE)
	default:
		info.Fixed, info.Why = true, fmt.Sprintf("package %s backports the fix of %s (its changelog %s)", info.Commit, runcCVE, changelogPath)
	}
}

// changelogOf reads a Debian changelog (gzip or plain): the version of its
// newest entry, and whether any entry names runcCVE.
func changelogOf(path string) (newest string, namesCVE bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", false, err
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(f)
		if err != nil {
			return "", false, fmt.Errorf("%s: %w", path, err)
		}
		defer zr.Close()
		r = zr
	}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		// An entry's header: "runc (1.1.5+ds1-1+deb12u1) bookworm-security; urgency=high".
		if newest == "" && !strings.HasPrefix(line, " ") {
			if _, rest, ok := strings.Cut(line, " ("); ok {
				if v, _, ok := strings.Cut(rest, ")"); ok {
					newest = v
				}
			}
		}
		if strings.Contains(line, runcCVE) {
			namesCVE = true
		}
	}
	if err := sc.Err(); err != nil {
		return "", false, fmt.Errorf("%s: %w", path, err)
	}
	if newest == "" {
		return "", false, fmt.Errorf("%s: no entry", path)
	}
	return newest, namesCVE, nil
}

// versionAtLeast compares the leading dotted numbers of v ("1.1.5+ds1",
// "1.2.0-rc.1") with min ("1.1.12"). A pre-release of min counts as older.
func versionAtLeast(v, min string) bool {
	num := func(s string) ([]int, bool) {
		end := strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
		pre := false
		if end >= 0 {
			pre = s[end] == '-' || s[end] == '~'
			s = s[:end]
		}
		var out []int
		for p := range strings.SplitSeq(s, ".") {
			n, err := strconv.Atoi(p)
			if err != nil {
				return nil, pre
			}
			out = append(out, n)
		}
		return out, pre
	}
	a, pre := num(strings.TrimPrefix(v, "v"))
	b, _ := num(min)
	if a == nil {
		return false
	}
	for i := range max(len(a), len(b)) {
		var x, y int
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x != y {
			return x > y
		}
	}
	return !pre
}
