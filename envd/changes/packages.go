package changes

import (
	"bufio"
	"bytes"
	"sort"
	"strings"

	"github.com/envd-dev/envd/api/types"
)

// The package databases read, by manager.
const (
	dpkgStatus   = "/var/lib/dpkg/status"
	apkInstalled = "/lib/apk/db/installed"
)

// packageDB is an installed package set: name (with its architecture when
// one name is installed for several) -> package.
type packageDB map[string]types.Package

// parseDpkgStatus reads dpkg's status file: stanzas of "Field: value"
// lines separated by blank lines. Only packages whose Status ends in
// "installed" count (not config-files, half-installed or not-installed).
func parseDpkgStatus(b []byte) packageDB {
	db := packageDB{}
	var cur types.Package
	var status string
	flush := func() {
		if cur.Name != "" && strings.HasSuffix(status, " installed") {
			db.add(cur)
		}
		cur, status = types.Package{}, ""
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			flush()
			continue
		}
		if line[0] == ' ' || line[0] == '\t' {
			continue // a continuation of a multi-line field
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch k {
		case "Package":
			cur.Name = v
		case "Version":
			cur.Version = v
		case "Architecture":
			cur.Arch = v
		case "Status":
			status = " " + v
		}
	}
	flush()
	return db
}

// parseApkInstalled reads apk's installed database: records of "X:value"
// lines separated by blank lines (P name, V version, A architecture).
func parseApkInstalled(b []byte) packageDB {
	db := packageDB{}
	var cur types.Package
	flush := func() {
		if cur.Name != "" {
			db.add(cur)
		}
		cur = types.Package{}
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			flush()
			continue
		}
		if len(line) < 2 || line[1] != ':' {
			continue
		}
		switch line[0] {
		case 'P':
			cur.Name = line[2:]
		case 'V':
			cur.Version = line[2:]
		case 'A':
			cur.Arch = line[2:]
		}
	}
	flush()
	return db
}

// add keys a package by name, or by name:arch when the name is already
// there for another architecture (dpkg's multiarch).
func (db packageDB) add(p types.Package) {
	if old, ok := db[p.Name]; ok && old.Arch != p.Arch {
		delete(db, p.Name)
		db[old.Name+":"+old.Arch] = old
		db[p.Name+":"+p.Arch] = p
		return
	}
	if _, ok := db[p.Name+":"+p.Arch]; ok {
		db[p.Name+":"+p.Arch] = p
		return
	}
	db[p.Name] = p
}

// comparePackages lists what was added, removed and changed version from
// before to after, each by name.
func comparePackages(manager string, before, after packageDB) *types.PackageChanges {
	pc := &types.PackageChanges{Manager: manager, Added: []types.Package{}, Removed: []types.Package{}, Upgraded: []types.PackageUpgrade{}}
	for k, p := range after {
		old, ok := before[k]
		switch {
		case !ok:
			pc.Added = append(pc.Added, p)
		case old.Version != p.Version:
			pc.Upgraded = append(pc.Upgraded, types.PackageUpgrade{Name: p.Name, From: old.Version, To: p.Version})
		}
	}
	for k, p := range before {
		if _, ok := after[k]; !ok {
			pc.Removed = append(pc.Removed, p)
		}
	}
	sort.Slice(pc.Added, func(i, j int) bool { return pkgLess(pc.Added[i], pc.Added[j]) })
	sort.Slice(pc.Removed, func(i, j int) bool { return pkgLess(pc.Removed[i], pc.Removed[j]) })
	sort.Slice(pc.Upgraded, func(i, j int) bool { return pc.Upgraded[i].Name < pc.Upgraded[j].Name })
	return pc
}

func pkgLess(a, b types.Package) bool {
	if a.Name != b.Name {
		return a.Name < b.Name
	}
	return a.Arch < b.Arch
}
