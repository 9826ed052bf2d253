package apitest

import (
	"context"
	"fmt"
	"os"
	"sync"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/files"
	"github.com/envd-dev/envd/errdefs"
)

var filesDirs sync.Map // *Files -> string

// Files is the fake FileCore: it serves every instance's files from one
// directory of the node (Dir), acting as the test process; "i-missing" is
// not found.
type Files struct{ *Recorder }

// Dir is the directory the fake's file API serves, made on first use
// and left for the test's process to remove (os.TempDir).
func (c *Files) Dir() string {
	if d, ok := filesDirs.Load(c); ok {
		return d.(string)
	}
	d, err := os.MkdirTemp("", "apitest-files-")
	if err != nil {
		panic(err)
	}
	actual, _ := filesDirs.LoadOrStore(c, d)
	return actual.(string)
}

func (c *Files) OpenFiles(ctx context.Context, p types.Principal, id string, as types.FileUser, write bool) (*files.Root, error) {
	c.record("OpenFiles", p, id, as, write)
	if id == "i-missing" {
		return nil, fmt.Errorf("instance %q: %w", id, errdefs.ErrNotFound)
	}
	return files.Open(c.Dir(), files.Identity{UID: uint32(os.Getuid()), GID: uint32(os.Getgid())})
}

func (c *Files) WatchFiles(ctx context.Context, p types.Principal, id string, as types.FileUser, path string, recursive bool, emit func(types.FileEvent) error) error {
	root, err := c.OpenFiles(ctx, p, id, as, true)
	if err != nil {
		return err
	}
	defer root.Close()
	in, err := files.NewInotify(0, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	return root.Watch(ctx, in, files.WatchOptions{Path: path, Recursive: recursive, Key: p.Tenant}, emit)
}

// MaxFileBytes is 1 MiB in the fake.
func (c *Files) MaxFileBytes() int64 { return 1 << 20 }
