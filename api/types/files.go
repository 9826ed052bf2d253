package types

import "time"

// The file API (GET/PUT/DELETE /v1/instances/{i}/files and its
// subroutes). Paths are absolute paths as the instance sees them ("/etc/x");
// a ".." element is refused. Symlinks resolve inside the instance's root,
// as they would for a process in it.

// File types of FileInfo.Type.
const (
	FileTypeFile    = "file"
	FileTypeDir     = "dir"
	FileTypeSymlink = "symlink"
	FileTypeFIFO    = "fifo"
	FileTypeSocket  = "socket"
	FileTypeChar    = "char"  // a character device
	FileTypeBlock   = "block" // a block device
)

// FileInfo describes one entry of an instance's tree.
type FileInfo struct {
	Name string `json:"name"`
	// Path is the entry's absolute path in the instance.
	Path string `json:"path"`
	Type string `json:"type"`
	Size int64  `json:"size"`
	// Mode is the permission bits in octal, setuid, setgid and sticky
	// included ("0644", "4755").
	Mode    string    `json:"mode"`
	ModTime time.Time `json:"mtime"`
	// UID and GID are the owner as the instance sees it.
	UID int `json:"uid"`
	GID int `json:"gid"`
	// LinkTarget is a symlink's target, as stored.
	LinkTarget string `json:"link_target,omitempty"`
}

// FileList is the answer of GET .../files on a directory.
type FileList struct {
	Path    string     `json:"path"`
	Entries []FileInfo `json:"entries"`
	// ReadOnly is set when the instance is stopped and its files are
	// served from its retained layer, read-only.
	ReadOnly bool `json:"read_only,omitempty"`
	// NextPageToken is set when the directory has entries after this
	// page: pass it as page_token for the next one.
	NextPageToken string `json:"next_page_token,omitempty"`
}

// FileMkdirRequest is the body of POST .../files/mkdir.
type FileMkdirRequest struct {
	Path string `json:"path"`
	// Mode is octal ("0755", the default).
	Mode string `json:"mode,omitempty"`
	// Parents makes missing parents too and accepts an existing directory
	// (mkdir -p).
	Parents bool `json:"parents,omitempty"`
}

// FileMoveRequest is the body of POST .../files/move and .../files/copy.
type FileMoveRequest struct {
	From string `json:"from"`
	To   string `json:"to"`
	// Overwrite replaces an existing To (a directory only when empty, for a
	// move); without it an existing To is already_exists.
	Overwrite bool `json:"overwrite,omitempty"`
}

// FileArchiveResult is the answer of POST .../files/archive.
type FileArchiveResult struct {
	Path    string `json:"path"`
	Entries int    `json:"entries"`
}

// Event types of a FileEvent.
const (
	FileEventCreate = "create"
	FileEventModify = "modify"
	FileEventDelete = "delete"
	FileEventMove   = "move"
	// FileEventOverflow: events were lost (the kernel's queue overflowed);
	// the client lists the tree again.
	FileEventOverflow = "overflow"
)

// FileEvent is one event of GET .../files/watch (the SSE data line; the
// SSE event name is Type).
type FileEvent struct {
	Type string `json:"type"`
	// Path is the entry's absolute path in the instance (the new one of a
	// move).
	Path string `json:"path"`
	// From is a move's old path.
	From string    `json:"from,omitempty"`
	Dir  bool      `json:"dir,omitempty"`
	Time time.Time `json:"time"`
}

// FileUser is who a file request acts as (query parameters user, uid and
// gid). Empty: the image's user, as exec runs. User is a name from the
// instance's /etc/passwd or a number; UID and GID override it.
type FileUser struct {
	User string
	UID  *int
	GID  *int
}
