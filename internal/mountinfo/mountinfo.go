// Package mountinfo reads /proc/<pid>/mountinfo: what is mounted where, in
// one process's mount namespace.
package mountinfo

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
)

// Info is one line of a mountinfo file.
type Info struct {
	Dev        string // major:minor
	MountPoint string
	FSType     string
	Source     string
}

// Read parses a mountinfo file (e.g. "/proc/self/mountinfo"), in its
// order: later lines are mounted over earlier ones.
func Read(file string) ([]Info, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var out []Info
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// 36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 2 {
			continue
		}
		out = append(out, Info{Dev: f[2], MountPoint: unescape(f[4]), FSType: g[0], Source: unescape(g[1])})
	}
	return out, sc.Err()
}

// Under lists this process's mount points at or below dir, deepest (most
// recently mounted) first: the order to unmount them in.
func Under(dir string) ([]string, error) {
	infos, err := Read("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []string
	for i := len(infos) - 1; i >= 0; i-- {
		if mp := infos[i].MountPoint; mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	return out, nil
}

// unescape undoes the octal escapes (\040 for space, ...) of mountinfo.
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
