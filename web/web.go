// Package web holds envd's web console (issue 13): TypeScript sources in
// src/, bundled by esbuild (build.mjs, run by scripts/web-build.sh) into
// dist/, which is committed and embedded here so that a plain `go build`
// carries the console. api/console.go serves it at /console/.
//
// The build is deterministic: TestBundleMatchesSources builds the sources
// into a temporary directory and fails when the result differs from dist/
// by a byte.
package web

import (
	"embed"
	"io/fs"
)

//go:embed dist
var dist embed.FS

// Dist is the built console: index.html, the hashed script and stylesheet
// it names, and favicon.svg.
func Dist() fs.FS {
	sub, err := fs.Sub(dist, "dist")
	if err != nil {
		panic(err) // "dist" is a constant directory of the embedded tree
	}
	return sub
}

// NoncePlaceholder stands in index.html where the server puts the
// response's style nonce (api/console.go): the Content-Security-Policy
// allows inline <style> elements only with it.
const NoncePlaceholder = "__ENVD_STYLE_NONCE__"
