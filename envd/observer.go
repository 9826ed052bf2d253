package envd

import (
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/lifecycle"
	"github.com/envd-dev/envd/envd/ops"
	"github.com/envd-dev/envd/envd/save"
)

// Observer is told what the core's parts do, for the node's metrics
// (envd/metrics implements it): saves and pushes, restores and failed
// instances, finished operations.
type Observer interface {
	save.Observer
	lifecycle.Observer
	ops.Observer
}

// nopObserver is Config.Observer's default: nothing is observed.
type nopObserver struct{}

func (nopObserver) Saved(types.SaveResult)                                       {}
func (nopObserver) SaveFailed(error)                                             {}
func (nopObserver) Pushed(error)                                                 {}
func (nopObserver) Restored(string, time.Duration)                               {}
func (nopObserver) InstanceFailed(string)                                        {}
func (nopObserver) Idled(string, string)                                         {}
func (nopObserver) OperationFinished(types.OpKind, types.OpState, time.Duration) {}
