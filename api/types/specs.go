package types

// The parts of a build spec beyond packages (BuildRequest's Sources, Files,
// Env and Run), and the spec a version answers (GET
// /v1/projects/{p}/versions/{n}/spec).
//
// A build does, in this order: write the sources, install the packages,
// write the files, run the steps. Files come after the packages so that a
// file the spec sets wins over what a package's install wrote (a changed
// conffile, a user a package added to /etc/passwd).

// BuildSources are the package sources a build writes before it installs
// packages.
type BuildSources struct {
	// Apt are apt sources lists: a bare name is a file of
	// /etc/apt/sources.list.d (ending .list or .sources; "sources.list" is
	// /etc/apt/sources.list); an absolute path must lie under /etc/apt/.
	Apt []SourceFile `json:"apt,omitempty"`
	// AptKeys are apt signing keys: a bare name is a file of
	// /etc/apt/keyrings; an absolute path must lie under /etc/apt/ or
	// /usr/share/keyrings/.
	AptKeys []SourceFile `json:"apt_keys,omitempty"`
	// Apk are repository lines added to /etc/apk/repositories (a line
	// already there is not added again).
	Apk []string `json:"apk,omitempty"`
	// ApkKeys are apk signing keys: a bare name is a file of /etc/apk/keys;
	// an absolute path must lie under /etc/apk/.
	ApkKeys []SourceFile `json:"apk_keys,omitempty"`
}

// SourceFile is one sources list or key: text in Content, or bytes in
// ContentBase64 (a binary keyring), not both.
type SourceFile struct {
	Name          string `json:"name"`
	Content       string `json:"content,omitempty"`
	ContentBase64 string `json:"content_base64,omitempty"`
}

// BuildFile is a file a build writes into the version, after its packages
// are installed. Its content is one of Content (text), ContentBase64
// (bytes), or Source (a regular file of the build's uploaded context,
// BuildRequest.Context).
type BuildFile struct {
	// Path is absolute and clean inside the image: no "..", not "/", not
	// under /proc, /sys or /dev.
	Path          string `json:"path"`
	Content       string `json:"content,omitempty"`
	ContentBase64 string `json:"content_base64,omitempty"`
	Source        string `json:"source,omitempty"`
	// Mode is the permission bits in octal ("0644", the default; "0755").
	Mode string `json:"mode,omitempty"`
}

// BuildStep is one command a build runs after its files are written.
// Args is an argv run without a shell: shell characters in it are plain
// bytes. With Shell, Args is one string run by "sh -c".
type BuildStep struct {
	Args  []string `json:"args"`
	Shell bool     `json:"shell,omitempty"`
	// Dir is the working directory (absolute; default /).
	Dir string `json:"dir,omitempty"`
}

// BuildContext is an uploaded build context (POST
// /v1/projects/{p}/build-contexts, a tar): BuildFile.Source names its
// regular files.
type BuildContext struct {
	// Context is what BuildRequest.Context takes: the tar's sha256.
	Context   string `json:"context"`
	SizeBytes int64  `json:"size_bytes"`
	Files     int    `json:"files"` // regular files in it
}

// VersionSpec is a build spec that makes a version again (GET
// /v1/projects/{p}/versions/{n}/spec): for a version of kind build the
// spec it was built from (Declared); for any other version one made from
// what it changed against the base it sits on: the packages it added or
// upgraded, with versions; packages it removed as a run step; the apt or
// apk sources and keys it changed; the other files it changed under /etc.
// Omitted says what the spec leaves out, and why.
type VersionSpec struct {
	Project string `json:"project"`
	Version int    `json:"version"`
	Kind    string `json:"kind"`
	// Declared: Spec is the spec the version was built from, not one
	// derived from its changes.
	Declared bool `json:"declared"`
	// Base is the base image the version sits on (repo@digest), and
	// BaseVersion the project's version of kind base with that image (0
	// when the project has none: Spec.From is then unset).
	Base        string       `json:"base"`
	BaseVersion int          `json:"base_version"`
	Spec        BuildRequest `json:"spec"`
	Omitted     []SpecOmit   `json:"omitted"`
}

// SpecOmit is a change a derived spec does not reproduce.
type SpecOmit struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// Migration modes (MigrateRequest.Mode).
const (
	// MigrateRebase puts the version's own layers on the new base (the
	// default).
	MigrateRebase = "rebase"
	// MigrateRebuild builds the version's declared spec again on the new
	// base: a Dockerfile (or devcontainer.json) build with its final
	// stage's FROM naming the new base, or envd's spec of a version of
	// kind build made on a base version.
	MigrateRebuild = "rebuild"
)
