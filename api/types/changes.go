package types

// Changes is what changed between two versions of a project (GET
// /v1/projects/{p}/versions/{n}/changes): packages first, then files, with
// noisy directories (package lists, caches, logs) summarised instead of
// listed, and the directories that grew the most.
type Changes struct {
	Project string `json:"project"`
	// Version is the newer side; 0 for what a save of Instance would
	// capture now (GET /v1/instances/{i}/changes).
	Version  int    `json:"version"`
	Instance string `json:"instance,omitempty"`
	// Against is the version compared with: the version's parent unless
	// the request named another.
	Against  int             `json:"against"`
	Packages *PackageChanges `json:"packages,omitempty"` // nil: neither side has a package database
	// Added, Modified and Deleted list file system entries outside the
	// summarised directories, by path, at most Limit of each.
	Added      []FileChange `json:"added"`
	Modified   []FileChange `json:"modified"`
	Deleted    []FileChange `json:"deleted"`
	Summarized []DirSummary `json:"summarized"`
	// TopDirs are the directories (two levels deep) with the most bytes
	// added or rewritten, largest first.
	TopDirs []DirBytes   `json:"top_dirs"`
	Totals  ChangeTotals `json:"totals"`
	// Truncated: a list was cut at the limit; Totals still count all.
	Truncated bool `json:"truncated,omitempty"`
	// Excluded are the paths a save of Instance leaves out, and why
	// (instance changes only).
	Excluded []ExcludedPath `json:"excluded,omitempty"`
}

// PackageChanges compares the package databases (dpkg's status, apk's
// installed) of two versions.
type PackageChanges struct {
	Manager  string           `json:"manager"` // "dpkg" or "apk"
	Added    []Package        `json:"added"`
	Removed  []Package        `json:"removed"`
	Upgraded []PackageUpgrade `json:"upgraded"` // any version change, downgrades included
}

// Package is an installed package.
type Package struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Arch    string `json:"arch,omitempty"`
}

// PackageUpgrade is a package whose installed version changed.
type PackageUpgrade struct {
	Name string `json:"name"`
	From string `json:"from"`
	To   string `json:"to"`
}

// FileChange is one file system entry that was added, modified or deleted.
type FileChange struct {
	Path string `json:"path"`
	// Type: file, dir, symlink, hardlink, char, block or fifo.
	Type string `json:"type"`
	Size int64  `json:"size"`
	Mode string `json:"mode"` // permission bits in octal, e.g. "0644"
	UID  int    `json:"uid"`
	GID  int    `json:"gid"`
	Link string `json:"link,omitempty"` // symlink or hard link target
	// Was is the entry before a modification (modified entries only).
	Was *FileState `json:"was,omitempty"`
}

// FileState is an entry's metadata on the other side of a modification.
type FileState struct {
	Type string `json:"type"`
	Size int64  `json:"size"`
	Mode string `json:"mode"`
	UID  int    `json:"uid"`
	GID  int    `json:"gid"`
	Link string `json:"link,omitempty"`
}

// DirSummary counts the changes under a directory that is summarised
// rather than listed (package lists, caches, logs) and says why.
type DirSummary struct {
	Path     string `json:"path"`
	Reason   string `json:"reason"`
	Added    int    `json:"added"`
	Modified int    `json:"modified"`
	Deleted  int    `json:"deleted"`
	Bytes    int64  `json:"bytes"` // of added and modified files
}

// DirBytes is the bytes added or rewritten under a directory.
type DirBytes struct {
	Path  string `json:"path"`
	Bytes int64  `json:"bytes"`
	Files int    `json:"files"`
}

// ChangeTotals counts every change, summarised ones included.
type ChangeTotals struct {
	Added      int   `json:"added"`
	Modified   int   `json:"modified"`
	Deleted    int   `json:"deleted"`
	AddedBytes int64 `json:"added_bytes"` // of added and modified files
}

// ExcludedPath is a path a save leaves out, and why.
type ExcludedPath struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// ForkRequest is the body of POST /v1/instances/{i}/fork.
type ForkRequest struct {
	Message string `json:"message,omitempty"` // of the version the fork saves
	TTL     string `json:"ttl,omitempty"`     // of the new instances; as CreateInstanceRequest
	Retain  bool   `json:"retain,omitempty"`  // of the new instances
	// Memory forks the instance's processes too: one checkpoint with
	// memory (one freeze; the instance runs on), recorded as a checkpoint
	// of the project, and every new instance continues its processes from
	// it. Instances of the gvisor runtime class only (else
	// memory_checkpoint_unsupported, before anything is made).
	Memory bool `json:"memory,omitempty"`
	// Count is how many new instances start from the fork point, 1 to
	// MaxForkCount; 0 means 1. The tenant's instance quota must hold all
	// of them, or none starts.
	Count int `json:"count,omitempty"`
}

// MaxForkCount is the most instances one fork starts.
const MaxForkCount = 16

// ForkResult is the result of a fork operation: the version the instance
// was saved as (not current) and the instances started from it.
type ForkResult struct {
	Project string `json:"project"`
	Version int    `json:"version"`
	// Instance is the first of Instances (the only one when Count is 1).
	Instance Instance `json:"instance"`
	// Instances are all the new instances, each with its own id,
	// generation and address.
	Instances []Instance `json:"instances"`
	// Checkpoint is the checkpoint with memory the instances continue
	// (memory forks only; a later start from it, envctl up --checkpoint,
	// resumes it once more as any checkpoint).
	Checkpoint int `json:"checkpoint,omitempty"`
}
