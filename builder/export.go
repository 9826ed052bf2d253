package builder

import (
	"archive/tar"
	"bufio"
	"bytes"
	"crypto/md5"
	"crypto/sha1"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/internal/tarfs"
)

// Spec export: a build spec derived from what a version changed against
// the base it sits on. Its packages come from the package databases'
// difference; its sources, keys and files from the configuration trees,
// which ConfigTree flattens from the image's layers.

// MaxExportFileBytes is the largest file an exported spec carries inline.
const MaxExportFileBytes = 64 << 10

// configRoots are the trees an export reads.
var configRoots = []string{"/etc/", "/usr/share/keyrings/"}

// package databases an export reads whole.
const (
	dpkgStatus   = "/var/lib/dpkg/status"
	apkInstalled = "/lib/apk/db/installed"
)

// treeRoots are what an export records, whose parents a replay follows.
var treeRoots = append([]string{dpkgStatus, apkInstalled}, configRoots...)

// ConfigFile is an entry of a configuration tree.
type ConfigFile struct {
	Type    byte // tar typeflag
	Mode    int64
	Size    int64
	Link    string
	Content []byte // regular files up to MaxExportFileBytes; nil beyond
	Sum     [sha1.Size]byte
	MD5     [md5.Size]byte
}

// ConfigTree is the flattened state of the configuration trees (/etc,
// /usr/share/keyrings) and the package databases of an image.
type ConfigTree map[string]ConfigFile

// Clone copies t.
func (t ConfigTree) Clone() ConfigTree {
	out := make(ConfigTree, len(t))
	for k, v := range t {
		out[k] = v
	}
	return out
}

func wanted(p string) bool {
	if p == dpkgStatus || p == apkInstalled {
		return true
	}
	for _, r := range configRoots {
		if strings.HasPrefix(p, r) {
			return true
		}
	}
	return false
}

// IsDir: the replay removes what was below a directory.
func (f ConfigFile) IsDir() bool { return f.Type == tar.TypeDir }

// want records the configuration trees and the package databases; their
// parents (/, /usr, /var/lib/dpkg, ...) only matter when removed or
// replaced.
func want(p string) tarfs.Want {
	if wanted(p) {
		return tarfs.Record
	}
	if p == "/" {
		return tarfs.Below
	}
	for _, r := range treeRoots {
		if strings.HasPrefix(r, p+"/") {
			return tarfs.Below
		}
	}
	return tarfs.Skip
}

// Apply applies one uncompressed layer tar to t (tarfs.Replay). A hard
// link is its target's file.
func (t ConfigTree) Apply(layer io.Reader) error {
	return tarfs.Replay[ConfigFile]{Want: want, Value: func(e tarfs.LayerEntry, target ConfigFile, hasTarget bool) (ConfigFile, error) {
		h := e.Header
		if h.Typeflag == tar.TypeLink && hasTarget {
			return target, nil
		}
		f := ConfigFile{Type: h.Typeflag, Mode: h.Mode & 0o7777, Size: h.Size, Link: h.Linkname}
		if h.Typeflag == tar.TypeReg {
			s1, m5 := sha1.New(), md5.New()
			var buf bytes.Buffer
			w := io.MultiWriter(s1, m5)
			keep := e.Path == dpkgStatus || e.Path == apkInstalled || h.Size <= MaxExportFileBytes
			if keep {
				w = io.MultiWriter(s1, m5, &buf)
			}
			if _, err := io.Copy(w, e.Body); err != nil {
				return ConfigFile{}, err
			}
			copy(f.Sum[:], s1.Sum(nil))
			copy(f.MD5[:], m5.Sum(nil))
			if keep {
				f.Content = buf.Bytes()
			}
		}
		return f, nil
	}}.Apply(t, layer)
}

// owned are the files the packages' own installs make with the content
// they have: dpkg conffiles with their md5, apk files with their sha1.
func owned(t ConfigTree) map[string]string {
	out := map[string]string{}
	if st, ok := t[dpkgStatus]; ok {
		pkg := ""
		inConf := false
		sc := bufio.NewScanner(bytes.NewReader(st.Content))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "Package: "):
				pkg, inConf = strings.TrimPrefix(line, "Package: "), false
			case strings.HasPrefix(line, "Conffiles:"):
				inConf = true
			case inConf && strings.HasPrefix(line, " "):
				if f := strings.Fields(line); len(f) >= 2 {
					out[f[0]+"\x00"+f[1]] = pkg
				}
			default:
				inConf = false
			}
		}
	}
	if db, ok := t[apkInstalled]; ok {
		pkg, dir, file := "", "", ""
		sc := bufio.NewScanner(bytes.NewReader(db.Content))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if len(line) < 2 || line[1] != ':' {
				continue
			}
			v := line[2:]
			switch line[0] {
			case 'P':
				pkg = v
			case 'F':
				dir = v
			case 'R':
				file = "/" + path.Join(dir, v)
			case 'Z':
				if strings.HasPrefix(v, "Q1") {
					if sum, err := base64.StdEncoding.DecodeString(v[2:]); err == nil {
						out[file+"\x00sha1:"+hex.EncodeToString(sum)] = pkg
					}
				}
			}
		}
	}
	return out
}

// ownedBy names the package whose install makes f at p as it is, "" when
// none does.
func ownedBy(own map[string]string, p string, f ConfigFile) string {
	if pkg, ok := own[p+"\x00"+hex.EncodeToString(f.MD5[:])]; ok {
		return pkg
	}
	return own[p+"\x00sha1:"+hex.EncodeToString(f.Sum[:])]
}

// generated are files under /etc that the system writes itself (caches,
// the runtime's files): a spec does not carry them.
var generated = map[string]string{
	"/etc/ld.so.cache": "written by ldconfig when packages are installed",
	"/etc/hostname":    "written by the runtime",
	"/etc/hosts":       "written by the runtime",
	"/etc/resolv.conf": "written by the runtime",
	"/etc/mtab":        "written by the runtime",
	"/etc/machine-id":  "written by the system",
	"/etc/shadow-":     "a backup the user tools write",
	"/etc/passwd-":     "a backup the user tools write",
	"/etc/group-":      "a backup the user tools write",
	"/etc/gshadow-":    "a backup the user tools write",
	"/etc/subuid-":     "a backup the user tools write",
	"/etc/subgid-":     "a backup the user tools write",
	"/etc/apk/world":   "apk's list of packages asked for (see packages)",
	"/etc/apt/apt.conf.d/01autoremove-kernels": "written by the kernel packages' scripts",
}

// Derive makes the spec that reproduces after's packages and
// configuration on before (the base's), from the package changes
// (pkgs, nil: none) and the two configuration trees. The spec installs
// added and upgraded packages at their versions and removes removed ones
// (a run step); it writes the sources and keys that changed before the
// install, and the other regular files that changed under /etc after it,
// inline up to MaxExportFileBytes; deletions under /etc become a run step.
// What it leaves out is listed with the reason.
func Derive(pkgs *types.PackageChanges, before, after ConfigTree) (types.BuildRequest, []types.SpecOmit) {
	var req types.BuildRequest
	omit := []types.SpecOmit{}
	var removed []string
	if pkgs != nil {
		switch pkgs.Manager {
		case "dpkg":
			req.Manager = Apt
		case "apk":
			req.Manager = Apk
		}
		for _, p := range pkgs.Added {
			req.Packages = append(req.Packages, p.Name+"="+p.Version)
		}
		for _, u := range pkgs.Upgraded {
			req.Packages = append(req.Packages, u.Name+"="+u.To)
		}
		for _, p := range pkgs.Removed {
			removed = append(removed, p.Name)
		}
		slices.Sort(req.Packages)
		slices.Sort(removed)
	}
	own := owned(after)
	src := &types.BuildSources{}
	var deleted []string
	paths := make([]string, 0, len(after))
	for p := range after {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	for _, p := range paths {
		f := after[p]
		if p == dpkgStatus || p == apkInstalled {
			continue
		}
		if old, ok := before[p]; ok && old.Type == f.Type && old.Mode == f.Mode && old.Link == f.Link && old.Sum == f.Sum {
			continue // unchanged
		}
		if why, ok := generated[p]; ok {
			omit = append(omit, types.SpecOmit{Path: p, Reason: why})
			continue
		}
		switch f.Type {
		case tar.TypeDir:
			continue // made with the files in it
		case tar.TypeSymlink:
			omit = append(omit, types.SpecOmit{Path: p, Reason: "a symlink (to " + f.Link + "): package installs make most (update-alternatives); add a run step [ln, -sfn, TARGET, PATH] if it is yours"})
			continue
		case tar.TypeReg, tar.TypeLink:
		default:
			omit = append(omit, types.SpecOmit{Path: p, Reason: "not a regular file"})
			continue
		}
		if pkg := ownedBy(own, p, f); pkg != "" {
			continue // the install of pkg makes it as it is
		}
		if f.Content == nil {
			omit = append(omit, types.SpecOmit{Path: p, Reason: fmt.Sprintf("%d bytes, larger than the %d a spec carries inline: put it in a build context (files[].source)", f.Size, MaxExportFileBytes)})
			continue
		}
		if placeSource(req.Manager, src, p, f, before[p], &omit) {
			continue
		}
		bf := types.BuildFile{Path: p, Mode: fmt.Sprintf("%04o", f.Mode)}
		setContent(f.Content, &bf.Content, &bf.ContentBase64)
		req.Files = append(req.Files, bf)
	}
	for p := range before {
		if _, ok := after[p]; !ok && p != dpkgStatus && p != apkInstalled {
			if dir := path.Dir(p); dir != "/" {
				if _, parentGone := before[dir]; parentGone {
					if _, inAfter := after[dir]; !inAfter {
						continue // under a deleted directory: that one is deleted
					}
				}
			}
			deleted = append(deleted, p)
		}
	}
	slices.Sort(deleted)
	if len(src.Apt)+len(src.AptKeys)+len(src.Apk)+len(src.ApkKeys) > 0 {
		req.Sources = src
	}
	if len(removed) > 0 {
		if req.Manager == Apk {
			req.Run = append(req.Run, types.BuildStep{Args: append([]string{"apk", "del"}, removed...)})
		} else {
			req.Run = append(req.Run, types.BuildStep{Args: append([]string{"env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "remove", "-y", "--"}, removed...)})
		}
	}
	if len(deleted) > 0 {
		req.Run = append(req.Run, types.BuildStep{Args: append([]string{"rm", "-rf", "--"}, deleted...)})
	}
	return req, omit
}

func setContent(b []byte, text, b64 *string) {
	if utf8.Valid(b) && !bytes.ContainsRune(b, 0) {
		*text = string(b)
		return
	}
	*b64 = base64.StdEncoding.EncodeToString(b)
}

// placeSource puts a changed file of the package manager's configuration
// among the sources (written before the install); false when it is not
// one. Without a manager (no package changed) sources are ordinary files.
func placeSource(manager string, src *types.BuildSources, p string, f, was ConfigFile, omit *[]types.SpecOmit) bool {
	sf := types.SourceFile{Name: p}
	setContent(f.Content, &sf.Content, &sf.ContentBase64)
	switch {
	case manager == Apt && (p == "/etc/apt/sources.list" || strings.HasPrefix(p, "/etc/apt/sources.list.d/")):
		src.Apt = append(src.Apt, sf)
	case manager == Apt && (strings.HasPrefix(p, "/etc/apt/trusted.gpg.d/") || strings.HasPrefix(p, "/etc/apt/keyrings/") ||
		strings.HasPrefix(p, "/usr/share/keyrings/") || p == "/etc/apt/trusted.gpg"):
		src.AptKeys = append(src.AptKeys, sf)
	case manager == Apk && strings.HasPrefix(p, "/etc/apk/keys/"):
		src.ApkKeys = append(src.ApkKeys, sf)
	case manager == Apk && p == "/etc/apk/repositories":
		old := map[string]bool{}
		for _, l := range strings.Split(string(was.Content), "\n") {
			old[strings.TrimSpace(l)] = true
		}
		now := map[string]bool{}
		for _, l := range strings.Split(string(f.Content), "\n") {
			l = strings.TrimSpace(l)
			now[l] = true
			if l != "" && !old[l] {
				src.Apk = append(src.Apk, l)
			}
		}
		for l := range old {
			if l != "" && !now[l] {
				*omit = append(*omit, types.SpecOmit{Path: p, Reason: "the line " + l + " was removed: a spec only adds repositories"})
			}
		}
	case strings.HasPrefix(p, "/usr/share/keyrings/"):
		// Outside /etc and not a source of this manager: not carried.
		*omit = append(*omit, types.SpecOmit{Path: p, Reason: "a keyring outside /etc of no package manager the spec uses"})
	default:
		return false
	}
	return true
}

// PackageChanges compares the package databases of two configuration
// trees with compare (changes.ComparePackageDatabases): dpkg's when either
// side has one, else apk's; nil when neither has one or it is the same
// file.
func PackageChanges(before, after ConfigTree, compare func(manager string, before, after []byte) *types.PackageChanges) *types.PackageChanges {
	for _, db := range []struct{ path, manager string }{{dpkgStatus, "dpkg"}, {apkInstalled, "apk"}} {
		b, inBefore := before[db.path]
		a, inAfter := after[db.path]
		if !inBefore && !inAfter {
			continue
		}
		if inBefore && inAfter && a.Sum == b.Sum {
			return nil
		}
		return compare(db.manager, b.Content, a.Content)
	}
	return nil
}
