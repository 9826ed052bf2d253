package save

import (
	"context"
	"log/slog"

	"github.com/containerd/containerd/v2/core/mount"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/freeze"
	"github.com/envd-dev/envd/envd/ops"
	"github.com/envd-dev/envd/registry"
	"github.com/envd-dev/envd/runtime"
	"github.com/envd-dev/envd/versions"
)

// Runtime is what a save needs of the container runtime: the rootfs
// mounts to find the upper dir, the freezer, and the task's status (is it
// frozen, its user namespace).
type Runtime interface {
	Mounts(ctx context.Context, id string) ([]mount.Mount, error)
	Pause(ctx context.Context, id string) error
	Resume(ctx context.Context, id string) error
	Status(ctx context.Context, id string) (runtime.Status, error)
}

// Store is what a save reads of the store.
type Store interface {
	GetInstance(ctx context.Context, tenant, id string) (versions.Instance, error)
	ListNodeInstances(ctx context.Context, node string) ([]versions.Instance, error)
	GetProject(ctx context.Context, tenant, name string) (versions.Project, error)
	GetVersion(ctx context.Context, tenant, project string, n int) (versions.Version, error)
	UnfinishedOperationOn(ctx context.Context, target string, kinds []types.OpKind) (versions.Operation, error)
}

// Registry is what a save needs of the registry.
type Registry interface {
	Get(ctx context.Context, ref string) (registry.Image, error)
	Append(ctx context.Context, parent registry.Image, layer registry.LayerFile, targetRepo, tag string, annotations map[string]string) (registry.Image, error)
}

// Content is the upload lease a push runs under and the drop of a pushed
// manifest whose commit failed (gc.Content).
type Content interface {
	Upload(ctx context.Context, push func() error) (*versions.Upload, error)
	Drop(ctx context.Context, img registry.Image)
}

// Quota is the early quota check of a new version (quota.Checker.Save).
type Quota interface {
	Save(ctx context.Context, tenant, project string, layerBytes int64) (volumeBytes int64, err error)
}

// Operations starts operations.
type Operations interface {
	Start(ctx context.Context, p types.Principal, spec ops.Spec) (types.Operation, error)
}

// Events receives a capture's progress: an operation's log (*ops.Op), or
// NoEvents for a capture that is no operation (hibernation).
type Events interface {
	Event(ctx context.Context, typ, msg string, data any)
}

// NoEvents drops progress.
type NoEvents struct{}

// Event does nothing.
func (NoEvents) Event(context.Context, string, string, any) {}

// Deps are what a Saver works with.
type Deps struct {
	Node    string // this node: only its instances are saved here
	WorkDir string // spool directories of captures in progress
	Runtime Runtime
	Store   Store
	Reg     Registry
	Content Content
	Quota   Quota
	Ops     Operations
	// Gate is the node's freeze gate, shared with the user's pause.
	Gate *freeze.Gate
	Log  *slog.Logger
	// Observer is told of every save and push (envd/metrics).
	Observer Observer
}

// Observer is told how saves and pushes end, for the node's metrics.
type Observer interface {
	// Saved is a save that committed a version, current or in conflict.
	Saved(res types.SaveResult)
	// SaveFailed is a save that ended with err before or at its commit.
	SaveFailed(err error)
	// Pushed is a version image's push (a save's, a build's, a
	// hibernation's): err nil when pushed and verified.
	Pushed(err error)
}

// Saver saves instances of this node.
type Saver struct {
	Deps
}

// New makes a Saver.
func New(d Deps) *Saver { return &Saver{Deps: d} }
