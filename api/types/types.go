// Package types is envd's wire contract: the request and response bodies of
// the HTTP API, instance and operation states, and the error body. It
// depends on the standard library only (and on errdefs, also a leaf), so
// clients and SDKs import it without the server's dependencies.
package types

import (
	"encoding/json"
	"io"
	"time"
)

// Terms (see DESIGN.md):
//
//   - A version is an immutable, numbered image of a project's environment.
//     Only ready versions can be current or restored.
//   - current is the version new instances start from. It changes only by a
//     compare-and-swap: the caller states the version it expects to replace.
//   - expected current of a save is the version the instance last saved, or
//     the one it started from; a save whose expectation no longer holds still
//     becomes a ready version but does not move current (result "conflict").
//   - generation is an instance's fencing token, bumped at every start; only
//     the newest generation may act on the instance.

// Principal is who a request acts for.
type Principal struct {
	Tenant string `json:"tenant"`
	Admin  bool   `json:"admin"`
}

// Info describes the server and its components.
type Info struct {
	Version    string            `json:"version"`
	Node       string            `json:"node"`
	DataDir    string            `json:"data_dir,omitempty"`
	Registry   string            `json:"registry"`
	Components map[string]string `json:"components"`
	SSH        *SSHInfo          `json:"ssh,omitempty"` // the node's SSH endpoint, when it serves one
}

// Image is a base image known to the registry.
type Image struct {
	Name   string `json:"name"`
	Ref    string `json:"ref"` // repo@digest, without the registry host
	Digest string `json:"digest"`
	Size   int64  `json:"size_bytes"`
}

// InstanceState is an instance's state; on the wire a string. Clients must
// treat states as an open set of strings.
type InstanceState string

// Instance states.
const (
	StatePending    InstanceState = "Pending"
	StateRunning    InstanceState = "Running"
	StatePausing    InstanceState = "Pausing"
	StatePaused     InstanceState = "Paused"
	StateResuming   InstanceState = "Resuming"
	StateStopping   InstanceState = "Stopping"
	StateStopped    InstanceState = "Stopped"
	StateTerminated InstanceState = "Terminated"
	StateFailed     InstanceState = "Failed"
)

// Live reports whether an instance in state s holds resources on its node
// (a container or a kept writable layer): every state but Terminated and
// Failed.
func (s InstanceState) Live() bool {
	switch s {
	case StatePending, StateRunning, StatePausing, StatePaused, StateResuming, StateStopping, StateStopped:
		return true
	}
	return false
}

// Reasons for state transitions, machine-readable.
const (
	ReasonCreated          = "created"
	ReasonStarted          = "started"
	ReasonUserDelete       = "user_delete"
	ReasonUserStop         = "user_stop"
	ReasonUserPause        = "user_pause"
	ReasonUserResume       = "user_resume"
	ReasonTTLExpiry        = "ttl_expiry"
	ReasonProvisionFailed  = "provision_failed"
	ReasonNodeLost         = "node_lost"
	ReasonTaskExited       = "task_exited"
	ReasonProvisionTimeout = "provision_timeout"
	ReasonBuildFinished    = "build_finished" // a build's or trial's container, removed when the build ended
	ReasonOOMKilled        = "oom_killed"     // the init was killed by the OOM killer (memory limit)
	ReasonShimLost         = "shim_lost"      // the task vanished with its runtime shim, as did those of the instances sharing it
	ReasonForkFailed       = "fork_failed"    // a copy of a fork, removed because another copy of the same fork did not start
)

// Project is one lineage of environments.
type Project struct {
	Name        string   `json:"name"`
	BaseImage   string   `json:"base_image"`
	Current     int      `json:"current_version"`
	Excludes    []string `json:"excludes,omitempty"`
	Compression string   `json:"compression"`
	Volumes     []Volume `json:"volumes,omitempty"`
	// Prefetch are the files instances read first after a restore, recorded
	// in their first minute; saves put them first in eStargz layers.
	Prefetch []string `json:"prefetch,omitempty"`
	// PrefetchHead is how many of Prefetch the recorded instance had read
	// when its first command ended: a lazy start reads those ahead before
	// it reports Running, the rest after its first command. 0: not known.
	PrefetchHead int `json:"prefetch_head,omitempty"`
	// Retention is the project's version retention policy; absent = keep
	// every version.
	Retention *Retention `json:"retention,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
	// Limits are the project's own resource limits; fields unset take the
	// node's defaults (see Limits).
	Limits *Limits `json:"limits,omitempty"`
	// Egress and IsolateInstances are the project's network policy; see
	// ProjectNetwork.
	Egress           string `json:"egress"`
	IsolateInstances bool   `json:"isolate_instances"`
	// Idle is the project's own idle setting (see IdleSetting); absent =
	// the node's default.
	Idle *IdleSetting `json:"idle,omitempty"`
	// Validate are the commands every migration of the project runs in its
	// trial instance, a rollout's included (PUT .../validation).
	Validate [][]string `json:"validate,omitempty"`
	// CurrentBase is the imported base image the current version sits on,
	// found by layers (GET /v1/projects/{p} only); base_image stays the
	// base the project was created on.
	CurrentBase string `json:"current_base,omitempty"`
	// RolloutFailure is set while a rollout's failure to move the project
	// is unanswered; the next successful switch of current clears it.
	RolloutFailure *RolloutFailure `json:"rollout_failure,omitempty"`
	// Pool is the project's warm pool (PUT .../pool); absent = none.
	Pool *PoolSetting `json:"pool,omitempty"`
	// RuntimeClass is the runtime class its instances run on ("runc",
	// "gvisor"; PUT .../runtime-class); absent = the default of the node
	// that starts each one.
	RuntimeClass string `json:"runtime_class,omitempty"`
	// Docker: its instances may run dockerd and nested containers (PUT
	// .../docker); only with runtime class "gvisor" (else 409
	// failed_precondition, details.feature "docker"). Docs: api.md
	// "Docker inside an instance".
	Docker bool `json:"docker,omitempty"`
}

// ProjectDocker is the body of PUT /v1/projects/{p}/docker. Instances
// already made keep what they were made with.
type ProjectDocker struct {
	Docker bool `json:"docker"`
}

// ProjectRuntimeClass is the body of PUT /v1/projects/{p}/runtime-class:
// "" = the node's default. Instances already made keep their class.
type ProjectRuntimeClass struct {
	RuntimeClass string `json:"runtime_class"`
}

// Retention says which versions of a project a GC keeps besides the
// current one, pinned ones and those an instance uses: the newest KeepLast
// and those newer than KeepNewerThan (a Go duration). Zero or "" = no limit
// of that kind; both unset keep everything. The body of PUT
// /v1/projects/{p}/retention.
type Retention struct {
	KeepLast      int    `json:"keep_last,omitempty"`
	KeepNewerThan string `json:"keep_newer_than,omitempty"`
}

// GCRequest is the body of POST /v1/admin/gc.
type GCRequest struct {
	// DryRun lists what would be collected and deletes nothing.
	DryRun bool `json:"dry_run,omitempty"`
}

// GCResult is the result of a gc operation.
type GCResult struct {
	DryRun bool `json:"dry_run,omitempty"`
	// Versions deleted (with DryRun: that would be).
	Versions []GCVersion `json:"versions"`
	// OrphanVolumes are volumes on the node that ran the gc whose project
	// no longer exists, removed (with DryRun: that would be), as
	// "tenant/project/volume".
	OrphanVolumes []string `json:"orphan_volumes,omitempty"`
	// Swept: the registry's unreferenced blobs were deleted; the counts are
	// the registry's blobs before and after.
	Swept       bool   `json:"swept"`
	BlobsBefore int    `json:"blobs_before,omitempty"`
	BlobsAfter  int    `json:"blobs_after,omitempty"`
	BytesBefore int64  `json:"bytes_before,omitempty"`
	BytesAfter  int64  `json:"bytes_after,omitempty"`
	Note        string `json:"note,omitempty"`
	// OrphanManifests are manifests of project repositories that no
	// version owned (a crash between push and commit, a deleted project),
	// deleted by the sweep, as "repo@digest".
	OrphanManifests []string `json:"orphan_manifests,omitempty"`
	// Checkpoints deleted by retention (with DryRun: that would be), each
	// with its archives; their versions are in Versions.
	Checkpoints []GCCheckpoint `json:"checkpoints,omitempty"`
}

// GCVersion is a version a GC deleted.
type GCVersion struct {
	Tenant    string `json:"tenant"`
	Project   string `json:"project"`
	Version   int    `json:"version"`
	Image     string `json:"image"`
	SizeBytes int64  `json:"size_bytes"`
}

// CreateProjectRequest is the body of POST /v1/projects.
type CreateProjectRequest struct {
	Name        string   `json:"name"`
	Base        string   `json:"base"` // an imported image name ("busybox") or repo@digest
	Excludes    []string `json:"excludes,omitempty"`
	Compression string   `json:"compression,omitempty"` // estargz (default), zstd, gzip
	// Volumes are "NAME:PATH[:UID:GID][:SIZE]", e.g. "work:/workspace",
	// "tools:/home/dev/.tools:1000:1000:2G".
	Volumes []string `json:"volumes,omitempty"`
	// Limits are the project's resource limits; nil = the node's defaults.
	Limits *Limits `json:"limits,omitempty"`
	// Egress and IsolateInstances: see ProjectNetwork. Default: open, not
	// isolated.
	Egress           string `json:"egress,omitempty"`
	IsolateInstances bool   `json:"isolate_instances,omitempty"`
	// Idle is the project's idle setting; nil = the node's default.
	Idle *IdleSetting `json:"idle,omitempty"`
	// RuntimeClass: see Project.RuntimeClass; "" = the node's default.
	RuntimeClass string `json:"runtime_class,omitempty"`
	// Docker: see Project.Docker; needs RuntimeClass "gvisor".
	Docker bool `json:"docker,omitempty"`
}

// Volume is a persistent directory mounted into every instance of a
// project (strategy 1). It outlives instances and is never part of a
// snapshot.
type Volume struct {
	Name      string   `json:"name"`
	Path      string   `json:"path"`
	UID       int      `json:"uid"`
	GID       int      `json:"gid"`
	SizeBytes int64    `json:"size_bytes"`
	PathAdd   []string `json:"path_add,omitempty"` // directories added to instances' PATH
	// UsedBytes is filled in listings from the node's filesystem; -1 when
	// the volume is not present on this node.
	UsedBytes int64 `json:"used_bytes,omitempty"`
}

// AddVolumeRequest is the body of POST /v1/projects/{p}/volumes.
type AddVolumeRequest struct {
	Spec    string   `json:"spec"` // NAME:PATH[:UID:GID][:SIZE]
	PathAdd []string `json:"path_add,omitempty"`
}

// VolumeArchiveRequest is the body of POST .../volumes/{v}/archive and
// .../restore. Archive: name is the archive's name within the volume (""
// = a generated time stamp); the key is chosen by the server, so key must
// be empty; replace overwrites an archive of the same name (otherwise
// already_exists). Restore: name (an archive of this volume) or key (an
// archive of this project, as the archive answer gave it), one of them.
type VolumeArchiveRequest struct {
	Key     string `json:"key,omitempty"`
	Name    string `json:"name,omitempty"`
	Replace bool   `json:"replace,omitempty"`
	// Checkpoint (restore only): the volume's archive of checkpoint N.
	Checkpoint int `json:"checkpoint,omitempty"`
}

// VolumeArchive describes an archive of a volume in object storage.
type VolumeArchive struct {
	Key   string `json:"key"`
	Bytes int64  `json:"bytes"`
	Files int    `json:"files"`
	// Recorded with the archive (tenant isolation):
	Name      string    `json:"name,omitempty"`
	Project   string    `json:"project,omitempty"`
	Volume    string    `json:"volume,omitempty"`
	Node      string    `json:"node,omitempty"`
	CreatedAt time.Time `json:"created_at,omitzero"`
	Replaced  bool      `json:"replaced,omitempty"` // an archive of the same name was replaced
}

// Version is one immutable environment of a project.
type Version struct {
	Project    string    `json:"project"`
	Number     int       `json:"version"`
	Kind       string    `json:"kind"`
	State      string    `json:"state"`
	Image      string    `json:"image"`
	Parent     int       `json:"parent,omitempty"`
	Message    string    `json:"message,omitempty"`
	SizeBytes  int64     `json:"size_bytes"`
	Layers     int       `json:"layers"`
	Pinned     bool      `json:"pinned"`
	Current    bool      `json:"current"`
	InstanceID string    `json:"instance_id,omitempty"`
	CreatedAt  time.Time `json:"created_at"`
}

// SetCurrentRequest is the body of POST /v1/projects/{p}/current.
// ExpectedCurrent is required (0 = no current): a switch is a
// compare-and-swap, never a blind write.
type SetCurrentRequest struct {
	Version         int  `json:"version"`
	ExpectedCurrent *int `json:"expected_current,omitempty"`
}

// Instance is a container of a project on one node.
type Instance struct {
	ID               string        `json:"id"`
	Project          string        `json:"project"`
	Node             string        `json:"node"`
	Version          int           `json:"version"` // started from
	LastSavedVersion int           `json:"last_saved_version,omitempty"`
	Generation       int64         `json:"generation"`
	State            InstanceState `json:"state"`
	Reason           string        `json:"reason"`
	Message          string        `json:"message,omitempty"`
	Retain           bool          `json:"retain"`
	Address          string        `json:"address,omitempty"` // IP on the node's bridge while running, read from the runtime
	// HibernatedVersion is set while a stopped retained instance has no
	// local layer and lives as that version; start brings it back.
	HibernatedVersion int `json:"hibernated_version,omitempty"`
	// HibernatedCheckpoint is set while the instance is hibernated with
	// its processes: the checkpoint (of its project) whose memory image
	// any access resumes. 0 = a wake starts from HibernatedVersion's files.
	HibernatedCheckpoint int `json:"hibernated_checkpoint,omitempty"`
	// MemoryNotKept is set while the instance is hibernated by the idle
	// action hibernate-memory without its processes: the stable reason
	// (class, connection, engine, state) memory could not be kept.
	MemoryNotKept string `json:"memory_not_kept,omitempty"`
	// Protection says what keeps the instance's data, and what a stop or a
	// removal loses, so a user can tell "installed" from "saved".
	Protection       Protection `json:"protection"`
	ExpiresAt        *time.Time `json:"expires_at,omitempty"`
	CreatedAt        time.Time  `json:"created_at"`
	LastTransitionAt time.Time  `json:"last_transition_at"`
	// Limits are the effective limits the instance was started with.
	Limits *Limits `json:"limits,omitempty"`
	// Idle stop (see IdleSetting): the effective setting, when the idle
	// clock started (Running, no session open), when the idle action runs
	// unless activity comes first, and the exec sessions open on the node
	// that answers (while any is, the instance is not idle).
	IdleAfter      string     `json:"idle_after,omitempty"`
	IdleAction     string     `json:"idle_action,omitempty"`
	IdleSince      *time.Time `json:"idle_since,omitempty"`
	IdleActionAt   *time.Time `json:"idle_action_at,omitempty"`
	ActiveSessions int        `json:"active_sessions,omitempty"`
	// NewerCurrent is the project's current version when it is a migration
	// (a newer base) the instance does not run: the instance keeps its
	// version until it is started anew (GET /v1/instances/{i} only).
	NewerCurrent int `json:"newer_current,omitempty"`
	// Placement is why the instance runs on its node (placement policy).
	Placement string `json:"placement,omitempty"`
}

// Protection is what keeps an instance's data.
type Protection struct {
	Volumes          []string `json:"volumes,omitempty"`            // paths kept across stop, removal and new instances
	RetainedLayer    bool     `json:"retained_layer"`               // the writable layer survives stop (on the node, or hibernated)
	LastSavedVersion int      `json:"last_saved_version,omitempty"` // newest version saved from this instance
	LostOnStop       string   `json:"lost_on_stop"`
	LostOnRemove     string   `json:"lost_on_remove"`
}

// CreateInstanceRequest is the body of POST /v1/projects/{p}/instances.
type CreateInstanceRequest struct {
	Version int    `json:"version,omitempty"` // 0 = current
	TTL     string `json:"ttl,omitempty"`     // Go duration; "" = server default, "none" = no expiry
	Retain  bool   `json:"retain,omitempty"`
	// Checkpoint, if set, starts from checkpoint N of the project: its
	// version, with every volume restored from the checkpoint's archive
	// before the start (Version must then be 0).
	Checkpoint int `json:"checkpoint,omitempty"`
	// NodeSelector: only nodes with every one of these labels take it.
	NodeSelector map[string]string `json:"node_selector,omitempty"`
}

// ExecRequest is the body of POST /v1/instances/{i}/exec.
type ExecRequest struct {
	Args  []string `json:"args"`
	Env   []string `json:"env,omitempty"`
	Cwd   string   `json:"cwd,omitempty"`
	Stdin string   `json:"stdin,omitempty"`
	// Timeout is a Go duration; "" = server default (10m).
	Timeout string `json:"timeout,omitempty"`
	// Generation, when set, fences the request: it is refused with
	// stale_generation unless it is the instance's newest generation.
	Generation int64 `json:"generation,omitempty"`
	// Wake starts a stopped or hibernated instance first and waits for it
	// to run (within the node's wake wait; past it: 503 waking).
	Wake bool `json:"wake,omitempty"`
}

// MaxExecOutput is the most of stdout and of stderr that a non-interactive
// exec returns; beyond it output is cut and Truncated is set.
const MaxExecOutput = 4 << 20

// ExecResult is the answer to a non-interactive exec.
type ExecResult struct {
	ExitCode  int    `json:"exit_code"`
	Stdout    string `json:"stdout"`
	Stderr    string `json:"stderr"`
	Truncated bool   `json:"truncated,omitempty"`
	// OOMKilled: the command was killed by the OOM killer (the instance's
	// memory limit); ExitCode is then 137.
	OOMKilled bool `json:"oom_killed,omitempty"`
}

// SaveRequest is the body of POST /v1/instances/{i}/save.
type SaveRequest struct {
	Message string `json:"message,omitempty"`
	// ExpectedCurrent overrides the instance's own expectation.
	ExpectedCurrent *int `json:"expected_current,omitempty"`
	// Generation, when set, fences the save like ExecRequest.Generation.
	Generation int64 `json:"generation,omitempty"`
}

// SaveResult is the result of a finished save operation.
type SaveResult struct {
	Project  string `json:"project"`
	Version  int    `json:"version"`
	Current  bool   `json:"current"`
	Conflict bool   `json:"conflict"` // true: ready but not current, expected current was replaced meanwhile
	Expected int    `json:"expected_current"`
	Image    string `json:"image"`
	// Timings in milliseconds; the freeze window is how long the instance's
	// processes were frozen.
	FreezeMS int64 `json:"freeze_ms"`
	SpoolMS  int64 `json:"spool_ms"`
	EncodeMS int64 `json:"encode_ms"`
	PushMS   int64 `json:"push_ms"`
	CommitMS int64 `json:"commit_ms"`
	TotalMS  int64 `json:"total_ms"`
	// LayerBytes is the compressed size of the new layer, Entries its tar entries.
	LayerBytes  int64  `json:"layer_bytes"`
	Entries     int    `json:"entries"`
	Compression string `json:"compression"`
}

// OpState is an operation's state; on the wire a string. Succeeded,
// failed and canceled are terminal.
type OpState string

// Operation states.
const (
	OpPending   OpState = "pending"
	OpRunning   OpState = "running"
	OpSucceeded OpState = "succeeded"
	OpFailed    OpState = "failed"
	OpCanceled  OpState = "canceled"
)

// OpKind is what an operation does; on the wire a string.
type OpKind string

// Operation kinds.
const (
	OpKindSave    OpKind = "save"
	OpKindRestore OpKind = "restore"
	OpKindBuild   OpKind = "build"
	OpKindMigrate OpKind = "migrate"
	OpKindGC      OpKind = "gc"
	OpKindFork    OpKind = "fork"
)

// Operation is a long-running asynchronous job.
type Operation struct {
	ID        string          `json:"id"`
	Kind      OpKind          `json:"kind"`
	Target    string          `json:"target"`
	State     OpState         `json:"state"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     *OpError        `json:"error,omitempty"`
	CreatedAt time.Time       `json:"created_at"`
	UpdatedAt time.Time       `json:"updated_at"`
}

// Done reports whether the operation reached a terminal state.
func (o Operation) Done() bool {
	return o.State == OpSucceeded || o.State == OpFailed || o.State == OpCanceled
}

// OpError is a failed operation's error, with a stable code.
type OpError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Event is one entry of an operation's ordered log.
type Event struct {
	Seq     int             `json:"seq"`
	At      time.Time       `json:"at"`
	Type    string          `json:"type"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

// HibernateRequest is the (optional) body of POST
// /v1/instances/{i}/hibernate. Without Memory the instance must be a
// stopped retained one, its layer saved as a version; with Memory a
// Running one is hibernated with its processes (gVisor class only:
// memory_checkpoint_unsupported otherwise, before anything changes), and
// any access resumes them.
type HibernateRequest struct {
	Memory bool `json:"memory,omitempty"`
}

// RenewRequest is the body of POST /v1/instances/{i}/renew.
type RenewRequest struct {
	TTL string `json:"ttl"` // Go duration from now, or "none"
}

// TermSize is a terminal's size in characters.
type TermSize struct {
	Cols uint16 `json:"cols"`
	Rows uint16 `json:"rows"`
}

// Stdio are the streams of a streaming or interactive exec.
type Stdio struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer // with TTY, Stderr is unused: the terminal merges both
	TTY            bool
	Resize         <-chan TermSize // terminal size changes; nil = none
}

// Quota limits a tenant; zero or "" is no limit. The body of PUT
// /v1/admin/tenants/{t}/quota.
type Quota struct {
	MaxInstances   int    `json:"max_instances,omitempty"`    // live instances at once
	MaxVersions    int    `json:"max_versions,omitempty"`     // versions of any one project
	MaxStoredBytes int64  `json:"max_stored_bytes,omitempty"` // layers added by versions + volume sizes
	MaxTTL         string `json:"max_ttl,omitempty"`          // a Go duration; with it, ttl "none" is refused
	// Maxima of one instance's limits (see Limits): a project asking more
	// is refused (quota_exceeded); node defaults above them are cut.
	MaxMemoryBytes int64   `json:"max_memory_bytes,omitempty"`
	MaxPids        int64   `json:"max_pids,omitempty"`
	MaxCPUs        float64 `json:"max_cpus,omitempty"`
	MaxDiskBytes   int64   `json:"max_disk_bytes,omitempty"`
	// MaxIdleAfter is the longest idle setting of the tenant's projects (a
	// Go duration); it also applies to projects that set none.
	MaxIdleAfter string `json:"max_idle_after,omitempty"`
	// RuntimeClasses are the runtime classes the tenant's projects and
	// instances may use ("runc", "gvisor"); absent = any. Others are
	// refused (permission_denied) before anything starts.
	RuntimeClasses []string `json:"runtime_classes,omitempty"`
}

// Usage is what a tenant uses, with its quota.
type Usage struct {
	Tenant    string `json:"tenant"`
	Instances int    `json:"instances"` // live: Pending to Stopping
	// StoredBytes = VersionBytes (the layers its versions added) +
	// VolumeBytes (the declared sizes of its volumes).
	StoredBytes  int64 `json:"stored_bytes"`
	VersionBytes int64 `json:"version_bytes"`
	VolumeBytes  int64 `json:"volume_bytes"`
	// DiskBytes: the writable-layer limits of its instances that hold a
	// layer on a node (part of StoredBytes).
	DiskBytes int64          `json:"disk_bytes"`
	Versions  map[string]int `json:"versions"` // per project
	Quota     Quota          `json:"quota"`
	// CheckpointBytes: what its checkpoints' volume archives store (part
	// of StoredBytes; their versions' layers are in VersionBytes).
	CheckpointBytes int64 `json:"checkpoint_bytes"`
}

// CreateTokenRequest is the body of POST /v1/admin/tenants/{t}/tokens.
type CreateTokenRequest struct {
	Admin bool `json:"admin,omitempty"`
	// ExpiresIn is the token's lifetime, a Go duration ("720h"); "" = it
	// never expires.
	ExpiresIn string `json:"expires_in,omitempty"`
}

// Token is a new API token, shown once.
type Token struct {
	Tenant string `json:"tenant"`
	Token  string `json:"token"`
	Admin  bool   `json:"admin"`
	// ID names the token for listing and revoking; ExpiresAt is nil for a
	// token that never expires.
	ID        int64      `json:"id,omitempty"`
	CreatedAt time.Time  `json:"created_at,omitzero"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// BuildRequest is the body of POST /v1/projects/{p}/builds: packages
// installed on a version in an isolated build container, saved as a new
// version of kind build.
type BuildRequest struct {
	// Manager is the base's package manager: "apt" or "apk".
	Manager string `json:"manager,omitempty"`
	// Packages are "name" or "name=version", checked against the manager's
	// grammar; they never reach a shell.
	Packages []string `json:"packages,omitempty"`
	// Validate are commands (argv, no shell) run in a trial instance of the
	// new version; each must exit 0, or the version is marked failed.
	Validate [][]string `json:"validate,omitempty"`
	// From is the version to build on; 0 = the project's first version
	// (its base).
	From int `json:"from,omitempty"`
	// Switch makes the new version current if current is still what it was
	// when the build started (else the result says conflict).
	Switch bool `json:"switch,omitempty"`
	// Sources, Files, Env, Run and Context: see specs.go. Packages may be
	// empty when Files or Run give the build something to do.
	Sources *BuildSources     `json:"sources,omitempty"`
	Files   []BuildFile       `json:"files,omitempty"`
	Env     map[string]string `json:"env,omitempty"` // of the install and run steps
	Run     []BuildStep       `json:"run,omitempty"`
	Context string            `json:"context,omitempty"` // an uploaded build context (BuildContext.Context)
	// Dockerfile makes this a Dockerfile build, run by BuildKit, instead of
	// one of envd's spec (then Manager, Packages, Sources, Files, Env, Run
	// and From stay empty); Context is its build context.
	Dockerfile *DockerfileBuild `json:"dockerfile,omitempty"`
}

// DockerfileBuild is a build from a Dockerfile. Its FROM images (and COPY
// --from, RUN --mount from=) must be images imported on the node or
// earlier stages: no registry outside is reached.
type DockerfileBuild struct {
	Content string            `json:"content"`          // the Dockerfile's text
	Args    map[string]string `json:"args,omitempty"`   // build arguments (--build-arg)
	Target  string            `json:"target,omitempty"` // the stage to build; "" = the last
}

// BuildResult is the result of a build operation.
type BuildResult struct {
	Project  string `json:"project"`
	Version  int    `json:"version"`
	From     int    `json:"from"`
	Key      string `json:"key"`    // base image + normalized spec; equal keys reuse a build
	Cached   bool   `json:"cached"` // an earlier build with the same key was reused
	Current  bool   `json:"current"`
	Conflict bool   `json:"conflict,omitempty"` // Switch asked, but current had moved
	BuildMS  int64  `json:"build_ms"`
	// Validated are the validation commands that passed.
	Validated int `json:"validated"`
}

// MigrateRequest is the body of POST /v1/projects/{p}/migrations: the
// current version's own layers put on a new base image.
type MigrateRequest struct {
	// Base is the new base: an imported image name or repo@digest.
	Base string `json:"base"`
	// Validate are commands (argv, no shell) run in a trial instance of the
	// new version; each must exit 0, or the version is marked failed.
	Validate [][]string `json:"validate,omitempty"`
	// Switch makes the new version current if current is still the version
	// migrated (else the result says conflict).
	Switch bool `json:"switch,omitempty"`
	// Mode is MigrateRebase (the default) or MigrateRebuild.
	Mode string `json:"mode,omitempty"`
}

// MigrateResult is the result of a migrate operation.
type MigrateResult struct {
	Project string `json:"project"`
	Version int    `json:"version"` // the new version, of kind migration
	From    int    `json:"from"`    // the version migrated, kept for rollback
	OldBase string `json:"old_base"`
	NewBase string `json:"new_base"`
	// Conflicts are the paths both the base update and the project's layers
	// changed (the project's version wins in the result), package
	// databases first; DatabaseConflict says one of them is a package
	// database: the package manager then sees the project's package set,
	// not the new base's.
	Conflicts        []string `json:"conflicts"`
	DatabaseConflict bool     `json:"database_conflict"`
	Validated        int      `json:"validated"`
	Current          bool     `json:"current"`
	Conflict         bool     `json:"conflict,omitempty"` // Switch asked, but current had moved
	Mode             string   `json:"mode,omitempty"`     // how the version was made: rebase or rebuild
}

// Limits are one instance's resource limits; a zero field is "not set".
// An instance's effective limits are, per field, its project's value, else
// the node's default (Config.DefaultLimits), else none; then cut to the
// tenant's maximum (Quota.Max*), which also applies when neither sets one.
// The body of PUT /v1/projects/{p}/limits.
type Limits struct {
	MemoryBytes int64   `json:"memory_bytes,omitempty"` // memory (swap not allowed beyond it)
	Pids        int64   `json:"pids,omitempty"`         // processes and threads
	CPUs        float64 `json:"cpus,omitempty"`         // CPU quota in cores (1.5 = one and a half)
	CPUWeight   uint64  `json:"cpu_weight,omitempty"`   // relative share, 1-10000 (100 = default)
	IOWeight    uint16  `json:"io_weight,omitempty"`    // relative block IO share, 10-1000; a no-op where the host has no IO weight
	DiskBytes   int64   `json:"disk_bytes,omitempty"`   // writable layer size; counts toward max_stored_bytes
	// AllowPrivilegeEscalation turns no_new_privs off: a non-root user's
	// sudo (setuid binaries) works. Off by default; root's sudo works
	// either way.
	AllowPrivilegeEscalation bool `json:"allow_privilege_escalation,omitempty"`
}

// ProjectNetwork is a project's network policy, the body of PUT
// /v1/projects/{p}/network.
//   - Egress: "open" (default: the internet, private ranges dropped),
//     "none" (nothing beyond the project's own instances, no DNS server), or
//     "allow:ENTRY,..." with IPv4 CIDRs, addresses and host names (resolved
//     when an instance starts) plus DNS.
//   - IsolateInstances: the project's instances cannot connect to each
//     other either. Other projects' instances never can.
//
// Whatever the policy, instances never reach the node, link-local
// addresses or the cluster's endpoints.
type ProjectNetwork struct {
	Egress           string `json:"egress"`
	IsolateInstances bool   `json:"isolate_instances"`
}

// TokenInfo describes an API token without the token itself, which is
// shown only once, at creation.
type TokenInfo struct {
	ID         int64      `json:"id"`
	Tenant     string     `json:"tenant"`
	Admin      bool       `json:"admin"`
	CreatedAt  time.Time  `json:"created_at"`
	ExpiresAt  *time.Time `json:"expires_at,omitempty"`   // absent: never expires
	RevokedAt  *time.Time `json:"revoked_at,omitempty"`   // absent: not revoked
	LastUsedAt *time.Time `json:"last_used_at,omitempty"` // to the minute; absent: never used
}
