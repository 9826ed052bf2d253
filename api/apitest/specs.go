package apitest

import (
	"context"
	"fmt"
	"io"

	"github.com/envd-dev/envd/api/types"
)

// Specs is the fake SpecCore.
type Specs struct{ *Recorder }

// VersionSpec answers a declared spec installing tree.
func (c *Specs) VersionSpec(ctx context.Context, p types.Principal, project string, n int) (types.VersionSpec, error) {
	return echo(c, "VersionSpec", p, types.VersionSpec{Project: project, Version: n, Kind: "build", Declared: true,
		Base: "envd/images/base@sha256:0000000000000000000000000000000000000000000000000000000000000000", BaseVersion: 1,
		Spec: types.BuildRequest{Manager: "apt", Packages: []string{"tree=2.1.0-1"},
			Files: []types.BuildFile{{Path: "/etc/app.conf", Content: "a: 1\n# two lines\n", Mode: "0644"}},
			Env:   map[string]string{"YES": "no"},
			Run:   []types.BuildStep{{Args: []string{"echo", "a;b $(x) 'q' \"d\""}}}},
		Omitted: []types.SpecOmit{{Path: "/etc/ld.so.cache", Reason: "written by ldconfig"}}}, project, n)
}

// UploadBuildContext reads the tar and answers a fixed digest.
func (c *Specs) UploadBuildContext(ctx context.Context, p types.Principal, project string, r io.Reader) (types.BuildContext, error) {
	n, _ := io.Copy(io.Discard, r)
	return echo(c, "UploadBuildContext", p, types.BuildContext{Context: "sha256:1111111111111111111111111111111111111111111111111111111111111111", SizeBytes: n}, project)
}

// OperationLogs writes "log of ID".
func (c *Specs) OperationLogs(ctx context.Context, p types.Principal, id string, w io.Writer) error {
	if _, err := echo(c, "OperationLogs", p, struct{}{}, id); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "log of %s\n", id)
	return err
}
