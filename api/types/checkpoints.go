package types

import "time"

// OpKindCheckpoint is the operation of POST /v1/instances/{i}/checkpoint.
const OpKindCheckpoint OpKind = "checkpoint"

// CheckpointRequest is the body of POST /v1/instances/{i}/checkpoint.
type CheckpointRequest struct {
	Message string `json:"message,omitempty"`
	// SetCurrent makes the checkpoint's version current by compare-and-swap,
	// as a save does; by default a checkpoint leaves current alone.
	SetCurrent bool `json:"set_current,omitempty"`
	// Memory also captures the instance's processes (memory, registers,
	// open files, sockets) at the same freeze, as a memory image in the
	// registry; an instance started from the checkpoint continues them.
	// Instances of the gvisor runtime class only (else
	// memory_checkpoint_unsupported).
	Memory bool `json:"memory,omitempty"`
}

// Checkpoint is one freeze of an instance recorded as one unit: its
// rootfs as a version and each volume of its project as an archive, taken
// at the same moment. Retention and GC keep or delete it whole.
type Checkpoint struct {
	ID       int    `json:"id"` // per project
	Project  string `json:"project"`
	Version  int    `json:"version"`
	Instance string `json:"instance"`
	Message  string `json:"message,omitempty"`
	// Volumes are the archives, one per volume, by name.
	Volumes []CheckpointVolume `json:"volumes"`
	// VersionBytes is the layer the version added, VolumeBytes the
	// archives; Bytes is both, what the checkpoint adds to stored bytes.
	VersionBytes int64     `json:"version_bytes"`
	VolumeBytes  int64     `json:"volume_bytes"`
	Bytes        int64     `json:"bytes"`
	FreezeMS     int64     `json:"freeze_ms"`
	Node         string    `json:"node"`
	CreatedAt    time.Time `json:"created_at"`
	// Memory is the checkpoint's memory image; absent for one without.
	// Bytes includes its NewBytes.
	Memory *CheckpointMemory `json:"memory,omitempty"`
}

// CheckpointMemory is a checkpoint's memory image: an OCI artifact
// (artifactType application/vnd.envd.memory.v1) in the project's
// repository, whose subject is the checkpoint version's manifest.
type CheckpointMemory struct {
	Image string `json:"image"` // repo@digest
	// Bytes is what the image holds (its distinct non-zero chunks);
	// NewBytes what it added to the registry (chunks no earlier image had),
	// which is what counts in stored bytes.
	Bytes    int64 `json:"bytes"`
	NewBytes int64 `json:"new_bytes"`
	// FreezeMS is the engine's part of the checkpoint's freeze.
	FreezeMS int64 `json:"freeze_ms"`
	// ResumedBy is the instance that resumed it last; one instance at a
	// time runs a checkpoint's processes.
	ResumedBy string `json:"resumed_by,omitempty"`
}

// CheckpointVolume is a checkpoint's archive of one volume.
type CheckpointVolume struct {
	Volume string `json:"volume"`
	Key    string `json:"key"`
	Bytes  int64  `json:"bytes"`
	Files  int    `json:"files"`
}

// CheckpointResult is the result of a checkpoint operation.
type CheckpointResult struct {
	Checkpoint Checkpoint `json:"checkpoint"`
	// Current: the version became current (set_current asked and the
	// compare-and-swap won); Conflict: set_current asked and current had
	// moved, so it did not.
	Current  bool `json:"current"`
	Conflict bool `json:"conflict,omitempty"`
	// FreezeMS is how long the instance's processes were frozen (the
	// rootfs pass and the volumes' flush); VolumeFreezeMS how long writes to
	// the volumes waited while their images were copied.
	FreezeMS       int64 `json:"freeze_ms"`
	VolumeFreezeMS int64 `json:"volume_freeze_ms"`
	ArchiveMS      int64 `json:"archive_ms"`
	TotalMS        int64 `json:"total_ms"`
	// MemoryPushMS is how long the memory image's push took (memory only).
	MemoryPushMS int64 `json:"memory_push_ms,omitempty"`
}

// GCCheckpoint is a checkpoint a GC deleted (retention counts checkpoints
// as units: its version and archives go together).
type GCCheckpoint struct {
	Tenant   string `json:"tenant"`
	Project  string `json:"project"`
	ID       int    `json:"id"`
	Version  int    `json:"version"`
	Archives int    `json:"archives"`
	Bytes    int64  `json:"bytes"`
}
