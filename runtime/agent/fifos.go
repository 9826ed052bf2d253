package agent

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
)

// FIFOs run inside a gVisor instance live in the sandbox's memory only:
// runsc's gofer refuses mknod of anything but a regular file on the host
// (EPERM) and the sentry then keeps a synthetic FIFO of its own, which
// never reaches the writable layer a save reads. The node cannot see them;
// the instance can:
//
//	envd-agent fifos    print the FIFOs of the instance's root file system
//	                    (other mounts, /proc, /sys and /dev left out) as a
//	                    JSON array of absolute paths, at most MaxFIFOs

// MaxFIFOs bounds fifos' list: past it the list ends with FIFOsTruncated.
const MaxFIFOs = 1000

// FIFOsTruncated ends a list that MaxFIFOs cut.
const FIFOsTruncated = "..."

// PrintFIFOs is `envd-agent fifos` (see above).
func PrintFIFOs(out io.Writer) error {
	mounts, err := mountPoints("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	found, err := FindFIFOs("/", mounts)
	if err != nil {
		return err
	}
	return json.NewEncoder(out).Encode(found)
}

// FindFIFOs walks root for FIFOs, without descending into skip (absolute
// paths under root: other mounts), /proc, /sys or /dev. Entries that
// vanish or cannot be read during the walk are passed over. A whole list
// is sorted, a cut one is in the walk's order. The walk reads each directory once
// (getdents, whose entry types need no stat) and makes a path only for
// directories and FIFOs; inside gVisor each directory read goes through
// the gofer (BenchmarkFindFIFOs, docs/gvisor.md).
func FindFIFOs(root string, skip map[string]bool) ([]string, error) {
	found := []string{}
	f, err := os.Open(root)
	if err != nil {
		return nil, err
	}
	f.Close()
	var walk func(dir, rel string) bool
	walk = func(dir, rel string) bool {
		name := dir
		if name == "" {
			name = "/" // root "/" trimmed
		}
		d, err := os.Open(name)
		if err != nil {
			return true
		}
		ents, _ := d.ReadDir(-1) // what was read before an error is walked
		d.Close()
		for _, e := range ents {
			t := e.Type()
			switch {
			case t.IsDir():
				r := rel + "/" + e.Name()
				if skip[r] || r == "/proc" || r == "/sys" || r == "/dev" {
					continue
				}
				if !walk(dir+"/"+e.Name(), r) {
					return false
				}
			case t&fs.ModeNamedPipe != 0:
				if len(found) == MaxFIFOs {
					found = append(found, FIFOsTruncated)
					return false
				}
				found = append(found, rel+"/"+e.Name())
			}
		}
		return true
	}
	if walk(strings.TrimSuffix(root, "/"), "") {
		slices.Sort(found)
	}
	return found, nil
}

// mountPoints are the mount points of /proc/self/mountinfo but "/".
func mountPoints(mountinfo string) (map[string]bool, error) {
	f, err := os.Open(mountinfo)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		if p := unescapeMount(fields[4]); p != "/" {
			out[p] = true
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		// An empty mount table is no table: walking every mount would
		// also walk volumes, which are never in a version.
		return nil, errors.New("no mounts in " + mountinfo)
	}
	return out, nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, ok := octal(s[i+1 : i+4]); ok {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func octal(s string) (byte, bool) {
	if len(s) != 3 {
		return 0, false
	}
	var v int
	for _, c := range s {
		if c < '0' || c > '7' {
			return 0, false
		}
		v = v*8 + int(c-'0')
	}
	if v > 255 {
		return 0, false
	}
	return byte(v), true
}
