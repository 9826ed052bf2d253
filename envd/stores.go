package envd

import "github.com/envd-dev/envd/versions"

// What each part uses of the store: the aggregates its Store interface
// names, and no others. A part whose interface lies in one aggregate is
// given that aggregate directly (wire).

type saveStore struct {
	versions.Instances
	versions.Projects
	versions.Versions
	versions.Operations
}

type volumeStore struct {
	versions.Projects
	versions.Instances
	versions.Volumes
	versions.Versions
}

type homeStore struct {
	versions.Volumes
	versions.Versions
}

type lifecycleStore struct {
	versions.Instances
	versions.Projects
	versions.Versions
	versions.Tenants
	versions.Nodes
}

type buildStore struct {
	versions.Projects
	versions.Versions
	versions.Content
}

type gcStore struct {
	versions.Projects
	versions.Versions
	versions.Content
}

type quotaStore struct {
	versions.Tenants
	versions.Projects
}

type rolloutStore struct {
	versions.Rollouts
	versions.Operations
	versions.Projects
	versions.Versions
}

// The stores of the parts of their own (parts.go).

type clusterStore struct {
	versions.Nodes
	versions.Instances
	versions.Operations
}

type checkpointStore struct {
	versions.Instances
	versions.Projects
	versions.Versions
	versions.Content
}

type portStore struct {
	versions.Nodes
	versions.Projects
	versions.Instances
}

type placerStore struct {
	versions.Projects
	versions.Versions
	versions.Nodes
	versions.Volumes
}
