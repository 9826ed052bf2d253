package changes

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/envd-dev/envd/registry"
)

// benchLayers is a base of 20,000 files of 4 KiB and a change of 1,000
// files (600 added, 300 rewritten, 100 deleted).
func benchLayers(b *testing.B) (layers, registry.Image, registry.Image) {
	b.Helper()
	body := strings.Repeat("x", 4096)
	var base []f
	for d := range 200 {
		base = append(base, f{name: fmt.Sprintf("usr/lib/d%03d/", d)})
		for i := range 100 {
			base = append(base, f{name: fmt.Sprintf("usr/lib/d%03d/f%03d", d, i), body: body})
		}
	}
	var change []f
	change = append(change, f{name: "opt/"}, f{name: "opt/new/"})
	for i := range 600 {
		change = append(change, f{name: fmt.Sprintf("opt/new/f%03d", i), body: body})
	}
	for i := range 300 {
		change = append(change, f{name: fmt.Sprintf("usr/lib/d%03d/f000", i%200+0), body: body + "changed"})
	}
	for i := range 100 {
		change = append(change, f{name: fmt.Sprintf("usr/lib/d%03d/.wh.f001", i)})
	}
	t := &testing.T{}
	src := layers{"base": layer(t, base...), "change": layer(t, change...)}
	return src, image("base"), image("base", "change")
}

// BenchmarkChanges compares Compute (shared layers read only for the
// touched paths) with flattening both versions whole and comparing, as a
// migration's conflict check flattens its bases.
func BenchmarkChanges(b *testing.B) {
	src, before, after := benchLayers(b)
	ctx := context.Background()
	b.Run("compute", func(b *testing.B) {
		for b.Loop() {
			if _, err := Compute(ctx, src, before, after, DefaultLimit); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("flatten-both", func(b *testing.B) {
		for b.Loop() {
			var sides [2]state
			for s, img := range []registry.Image{before, after} {
				sides[s] = state{}
				for i := range img.Layers {
					if err := readLayer(ctx, src, img, i, func(r io.Reader) error { return sides[s].apply(r, nil, map[string][]byte{}) }); err != nil {
						b.Fatal(err)
					}
				}
			}
			_ = compare(sides[0], sides[1], DefaultLimit)
		}
	})
}
