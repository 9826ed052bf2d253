package snapshotter

import (
	"archive/tar"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestLimitPrioritized(t *testing.T) {
	reg := func(name string, size int64) esgzEntry {
		return esgzEntry{hdr: &tar.Header{Name: name, Typeflag: tar.TypeReg, Size: size}}
	}
	link := func(name, target string) esgzEntry {
		return esgzEntry{hdr: &tar.Header{Name: name, Typeflag: tar.TypeLink, Linkname: target}}
	}
	dir := func(name string) esgzEntry {
		return esgzEntry{hdr: &tar.Header{Name: name, Typeflag: tar.TypeDir}}
	}
	entries := []esgzEntry{
		dir("usr/"), dir("var/cache/apt/"),
		reg("usr/bin/dot", 10<<10),
		reg("var/cache/apt/srcpkgcache.bin", 39<<20), // one file over PrioritizedFileMax
		link("var/cache/apt/hardlink.bin", "var/cache/apt/srcpkgcache.bin"),
		reg("usr/lib/a.so", 16<<20), reg("usr/lib/b.so", 16<<20), reg("usr/lib/c.so", 16<<20), // at PrioritizedFileMax: kept
		reg("usr/lib/d.so", 16<<20), // past PrioritizedMax with a, b, c and dot
		reg("usr/lib/small.so", 1<<20),
		reg("etc/replaced", 40<<20), dir("etc/replaced"), // a later entry replaces an earlier one
	}
	kept, over := limitPrioritized(entries, []string{
		"/usr/bin/dot", "/var/cache/apt/srcpkgcache.bin", "/var/cache/apt/hardlink.bin",
		"/usr/lib/a.so", "./usr/lib/b.so", "usr/lib/c.so", "/usr/lib/d.so", "/usr/lib/a.so",
		"/usr/lib/small.so", "/not/there", "/etc/replaced", "/usr/",
	})
	assert.Equal(t, []string{
		"/usr/bin/dot", "/usr/lib/a.so", "./usr/lib/b.so", "usr/lib/c.so", "/usr/lib/a.so",
		"/usr/lib/small.so", "/not/there", "/etc/replaced", "/usr/",
	}, kept, "the order is kept; a file listed twice counts once")
	assert.Equal(t, []string{"/var/cache/apt/srcpkgcache.bin", "/var/cache/apt/hardlink.bin", "/usr/lib/d.so"}, over)

	kept, over = limitPrioritized(entries, nil)
	assert.Empty(t, kept)
	assert.Empty(t, over)
}
