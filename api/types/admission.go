package types

// Kinds of concurrent work a tenant is limited in on one node (envd's
// TenantLimits and Service.Admit; the API takes a slot of the stream kinds
// for as long as a stream is open).
const (
	AdmitSaves  = "saves"  // running save operations
	AdmitBuilds = "builds" // running build operations
	AdmitExec   = "exec"   // exec requests and exec WebSockets in progress
	AdmitEvents = "events" // open operation event streams
)

// Kinds of the file transfers, limited per tenant and per node: each holds
// an open root and a client that may read or write slowly.
const (
	AdmitSFTP     = "sftp"     // SFTP sessions open
	AdmitArchives = "archives" // file API archive downloads and uploads in progress
)
