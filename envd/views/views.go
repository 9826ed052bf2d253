// Package views turns the store's records into what the API shows of
// them: one function per record, the one place a field of a project or a
// version is copied to its wire form.
package views

import (
	"encoding/json"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/spec"
	"github.com/envd-dev/envd/versions"
)

// Project is p as the API shows it: its spec's volumes and limits, its
// retention, validation commands and last rollout failure. Settings kept
// in tables of their own (idle, pool) are added by their features.
func Project(p versions.Project) types.Project {
	ps, _ := spec.Parse(p.Spec)
	out := types.Project{Name: p.Name, BaseImage: p.BaseImage, Current: p.Current, Excludes: p.Excludes,
		Compression: p.Compression, Volumes: ps.Volumes, Prefetch: p.Prefetch, PrefetchHead: p.PrefetchHead, CreatedAt: p.CreatedAt,
		Limits: ps.Limits, Egress: p.Egress, IsolateInstances: p.IsolateInstances, RuntimeClass: p.RuntimeClass,
		Docker: p.Docker}
	if len(p.Validate) > 0 {
		out.Validate = p.Validate
	}
	if len(p.RolloutFailure) > 0 {
		var f types.RolloutFailure
		if json.Unmarshal(p.RolloutFailure, &f) == nil {
			out.RolloutFailure = &f
		}
	}
	if r := p.Retention; r.KeepLast > 0 || r.KeepNewerThan > 0 {
		out.Retention = &types.Retention{KeepLast: r.KeepLast}
		if r.KeepNewerThan > 0 {
			out.Retention.KeepNewerThan = r.KeepNewerThan.String()
		}
	}
	return out
}

// Version is v as the API shows it.
func Version(v versions.Version) types.Version {
	return types.Version{Project: v.Project, Number: v.Number, Kind: v.Kind, State: v.State, Image: v.Image,
		Parent: v.Parent, Message: v.Message, SizeBytes: v.SizeBytes, Layers: v.Layers, Pinned: v.Pinned,
		Current: v.Current, InstanceID: v.InstanceID, CreatedAt: v.CreatedAt}
}
