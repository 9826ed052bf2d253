package api

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/envd-dev/envd/web"
)

// The web console (issue 13; package web, docs/api.md "Web console"): a
// page of static files embedded in the binary, served without a token
// (the page asks for one and keeps it in the browser's session storage;
// every call it makes is an ordinary /v1 request with that token).
//
//   - GET / and GET /console redirect to /console/;
//   - GET /console/ answers index.html with a fresh style nonce (see
//     consoleCSP); GET /console/{asset} the file, under a content-hashed
//     name cached for a year; GET /favicon.ico the icon.
//
// Nothing is fetched from elsewhere: the policy allows the node's own
// origin only.

// consoleCSP is the Content-Security-Policy of every console answer.
// Scripts, stylesheets, images and connections (fetch and the exec
// WebSocket) come from the node itself. Inline <style> elements, which
// xterm.js makes for its renderer, need the nonce of the answer; style
// attributes are never allowed (the bundle sets styles through CSSOM).
func consoleCSP(nonce string) string {
	return "default-src 'none'; script-src 'self'; style-src 'self' 'nonce-" + nonce + "'; img-src 'self'; " +
		"font-src 'self'; connect-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
}

type console struct {
	files fs.FS
	index []byte // index.html with web.NoncePlaceholder
}

// serveConsole adds the console's routes to e.
func serveConsole(e *gin.Engine) {
	files := web.Dist()
	index, err := fs.ReadFile(files, "index.html")
	if err != nil {
		panic(fmt.Sprintf("web console: the embedded bundle has no index.html (run scripts/web-build.sh): %v", err))
	}
	c := console{files: files, index: index}
	toConsole := func(g *gin.Context) { g.Redirect(http.StatusFound, "/console/") }
	e.GET("/", toConsole)
	e.GET("/console", toConsole)
	e.GET("/console/*asset", c.asset)
	e.GET("/favicon.ico", func(g *gin.Context) { c.file(g, "favicon.svg") })
}

func (c console) asset(g *gin.Context) {
	name := strings.TrimPrefix(g.Param("asset"), "/")
	if name == "" || name == "index.html" {
		c.page(g)
		return
	}
	c.file(g, name)
}

// page answers index.html with a nonce of its own.
func (c console) page(g *gin.Context) {
	b := make([]byte, 18)
	_, _ = rand.Read(b)
	nonce := base64.StdEncoding.EncodeToString(b)
	headers(g, consoleCSP(nonce))
	g.Header("Cache-Control", "no-store")
	g.Data(http.StatusOK, "text/html; charset=utf-8", bytes.ReplaceAll(c.index, []byte(web.NoncePlaceholder), []byte(nonce)))
}

// file answers one embedded asset.
func (c console) file(g *gin.Context, name string) {
	if strings.Contains(name, "/") || !fs.ValidPath(name) {
		writeError(g, fmt.Errorf("console asset %q: %w", name, errNotFound))
		return
	}
	b, err := fs.ReadFile(c.files, name)
	if err != nil {
		writeError(g, fmt.Errorf("console asset %q: %w", name, errNotFound))
		return
	}
	// An asset opened on its own (the SVG icon) runs nothing.
	headers(g, "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'")
	if name == "favicon.svg" {
		g.Header("Cache-Control", "public, max-age=86400")
	} else {
		// Every other asset's name carries its content's hash.
		g.Header("Cache-Control", "public, max-age=31536000, immutable")
	}
	ctype := mime.TypeByExtension(path.Ext(name))
	if ctype == "" {
		ctype = "application/octet-stream"
	}
	g.Data(http.StatusOK, ctype, b)
}

func headers(g *gin.Context, csp string) {
	g.Header("Content-Security-Policy", csp)
	g.Header("X-Content-Type-Options", "nosniff")
	g.Header("Referrer-Policy", "no-referrer")
	g.Header("X-Frame-Options", "DENY")
}
