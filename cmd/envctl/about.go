package main

import (
	"context"
	"io"
	"runtime/debug"
	"time"

	"github.com/spf13/cobra"
)

// clientVersion is envctl's version, kept equal to envd's BuildVersion; a
// release sets it with -ldflags "-X main.clientVersion=V".
var clientVersion = "0.1.0-dev"

// versionInfo is what envctl --version and envctl version print.
type versionInfo struct {
	Client      string `json:"client"`
	Commit      string `json:"commit,omitempty"`
	Server      string `json:"server,omitempty"`
	URL         string `json:"url,omitempty"`
	ServerError string `json:"server_error,omitempty"`
}

// serverVersionTimeout bounds the question to the server: a version that
// waits for a dead server is worse than one that says so.
const serverVersionTimeout = 3 * time.Second

// printVersion prints the client's version, and the server's when it
// answers; an unreachable server is reported, not an error.
func (a *app) printVersion(cmd *cobra.Command) error {
	v := versionInfo{Client: clientVersion}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				v.Commit = s.Value[:12]
			}
		}
	}
	c, err := a.client()
	if err == nil {
		ctx, cancel := context.WithTimeout(cmd.Context(), serverVersionTimeout)
		defer cancel()
		info, ierr := c.Info(ctx)
		v.URL, err = c.BaseURL(), ierr
		v.Server = info.Version
	}
	if err != nil {
		v.ServerError = err.Error()
	}
	return a.emit(v, func(w io.Writer) {
		client := v.Client
		if v.Commit != "" {
			client += " (" + v.Commit + ")"
		}
		row(w, "CLIENT:", client)
		if v.ServerError != "" {
			row(w, "SERVER:", "unknown: "+v.ServerError)
			return
		}
		row(w, "SERVER:", v.Server+" at "+v.URL)
	})
}
