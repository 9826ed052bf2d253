// The wire contract of envd's HTTP API, written by hand from the Go package
// api/types (github.com/envd-dev/envd/api/types). Each interface names the Go
// type it mirrors; field names are the JSON names. Optional fields (`?`) are
// those the Go side marks omitempty or pointer. Times are RFC 3339 strings.
//
// States, reasons, kinds, event types and error codes are open sets: the
// known values are listed for completion, and any other string is accepted.

/** A string with known values that also accepts any other string. */
export type Open<T extends string> = T | (string & {});

/** Go: types.Info. GET /v1/info. */
export interface Info {
  version: string;
  node: string;
  data_dir?: string;
  registry: string;
  components: Record<string, string>;
  /** The node's SSH endpoint, when it serves one. */
  ssh?: SSHInfo;
}

/** Go: types.SSHInfo. The node's SSH endpoint. */
export interface SSHInfo {
  /** host:port */
  addr: string;
  /** SHA256:<base64> */
  host_key_fingerprint: string;
  /** authorized_keys form, for known_hosts. */
  host_key: string;
}

/** Go: types.Image. */
export interface Image {
  name: string;
  /** repo@digest, without the registry host. */
  ref: string;
  digest: string;
  size_bytes: number;
}

/** Go: types.State* constants. */
export type InstanceState = Open<
  "Pending" | "Running" | "Pausing" | "Paused" | "Resuming" | "Stopping" | "Stopped" | "Terminated" | "Failed"
>;

/** Go: types.Reason* constants. */
export type InstanceReason = Open<
  | "created"
  | "started"
  | "user_delete"
  | "user_stop"
  | "user_pause"
  | "user_resume"
  | "ttl_expiry"
  | "provision_failed"
  | "node_lost"
  | "task_exited"
  | "provision_timeout"
  | "build_finished"
  | "oom_killed"
  | "shim_lost"
  | "fork_failed"
  | "hibernated"
  | "recovered"
  | "wake_failed"
>;

/** Go: types.Project. */
export interface Project {
  name: string;
  base_image: string;
  current_version: number;
  excludes?: string[];
  compression: Open<"estargz" | "zstd" | "gzip">;
  volumes?: Volume[];
  prefetch?: string[];
  /** How many of `prefetch` the recorded instance had read when its first command ended (0 or absent: not known). */
  prefetch_head?: number;
  retention?: Retention;
  created_at: string;
  limits?: Limits;
  egress: string;
  isolate_instances: boolean;
  /** The project's own idle stop; absent = the node's default. */
  idle?: IdleSetting;
  /** Commands every migration of the project runs in its trial instance. */
  validate?: string[][];
  /** GET of one project only: the imported base the current version sits on. */
  current_base?: string;
  /** Set while a rollout's failure to move the project is unanswered. */
  rollout_failure?: RolloutFailure;
  pool?: PoolSetting;
  /** "runc" or "gvisor"; absent = each node's default. */
  runtime_class?: RuntimeClass;
  /** Its instances may run dockerd (runtime class gvisor only); absent = false. */
  docker?: boolean;
}

/** A runtime class (Go: runtime.Class): runc (the node's kernel) or gvisor (a kernel of its own). */
export type RuntimeClass = "runc" | "gvisor";

/** A rollout could not move the project. Go: types.RolloutFailure */
export interface RolloutFailure {
  rollout: string;
  status: string;
  message?: string;
  at: string;
}

/** Go: types.Retention. The body of PUT /v1/projects/{p}/retention. */
export interface Retention {
  keep_last?: number;
  /** A Go duration ("720h"). */
  keep_newer_than?: string;
}

/** Go: types.GCRequest. The body of POST /v1/admin/gc. */
export interface GCRequest {
  dry_run?: boolean;
}

/** Go: types.GCVersion. */
export interface GCVersion {
  tenant: string;
  project: string;
  version: number;
  image: string;
  size_bytes: number;
}

/** Go: types.GCResult. The result of a gc operation. */
export interface GCResult {
  dry_run?: boolean;
  versions: GCVersion[] | null;
  orphan_volumes?: string[];
  swept: boolean;
  blobs_before?: number;
  blobs_after?: number;
  bytes_before?: number;
  bytes_after?: number;
  note?: string;
  orphan_manifests?: string[];
  checkpoints?: GCCheckpoint[];
}

/** Go: types.CreateProjectRequest. The body of POST /v1/projects. */
export interface CreateProjectRequest {
  name: string;
  /** An imported image name ("busybox") or repo@digest. */
  base: string;
  excludes?: string[];
  compression?: Open<"estargz" | "zstd" | "gzip">;
  /** "NAME:PATH[:UID:GID][:SIZE]". */
  volumes?: string[];
  limits?: Limits;
  /** "open" (default), "none" or "allow:ENTRY,...". */
  egress?: string;
  isolate_instances?: boolean;
  idle?: IdleSetting;
  runtime_class?: RuntimeClass;
  /** Its instances may run dockerd; needs runtime_class "gvisor" (else 409 failed_precondition). */
  docker?: boolean;
}

/** Go: types.Volume. */
export interface Volume {
  name: string;
  path: string;
  uid: number;
  gid: number;
  size_bytes: number;
  path_add?: string[];
  /** In listings; -1 when the volume is not on this node. */
  used_bytes?: number;
}

/** Go: types.AddVolumeRequest. The body of POST /v1/projects/{p}/volumes. */
export interface AddVolumeRequest {
  /** NAME:PATH[:UID:GID][:SIZE] */
  spec: string;
  path_add?: string[];
}

/** Go: types.VolumeArchiveRequest. The body of .../archive and .../restore. */
export interface VolumeArchiveRequest {
  key?: string;
  name?: string;
  replace?: boolean;
  /** Restore only: the volume's archive of checkpoint N. */
  checkpoint?: number;
}

/** Go: types.VolumeArchive. */
export interface VolumeArchive {
  key: string;
  bytes: number;
  files: number;
  name?: string;
  project?: string;
  volume?: string;
  node?: string;
  created_at?: string;
  replaced?: boolean;
}

/** Go: types.Version. */
export interface Version {
  project: string;
  version: number;
  kind: Open<"base" | "snapshot" | "build" | "migration">;
  state: Open<"creating" | "ready" | "failed" | "deleting">;
  image: string;
  parent?: number;
  message?: string;
  size_bytes: number;
  layers: number;
  pinned: boolean;
  current: boolean;
  instance_id?: string;
  created_at: string;
}

/**
 * Go: types.SetCurrentRequest. The body of POST /v1/projects/{p}/current.
 * expected_current is required: a switch is a compare-and-swap (0 = no
 * current).
 */
export interface SetCurrentRequest {
  version: number;
  expected_current: number;
}

/** Go: types.Protection. */
export interface Protection {
  volumes?: string[];
  retained_layer: boolean;
  last_saved_version?: number;
  lost_on_stop: string;
  lost_on_remove: string;
}

/** Go: types.Instance. */
export interface Instance {
  id: string;
  project: string;
  node: string;
  /** The version it started from. */
  version: number;
  last_saved_version?: number;
  generation: number;
  state: InstanceState;
  reason: InstanceReason;
  message?: string;
  retain: boolean;
  address?: string;
  hibernated_version?: number;
  /** While hibernated with its processes: the checkpoint whose memory image any access resumes. */
  hibernated_checkpoint?: number;
  /** While hibernated by the idle action hibernate-memory without its processes: why memory was not kept. */
  memory_not_kept?: Open<"class" | "connection" | "engine" | "state">;
  protection: Protection;
  expires_at?: string;
  created_at: string;
  last_transition_at: string;
  limits?: Limits;
  /** Idle stop: the effective setting, when the idle clock started, when the action runs. */
  idle_after?: string;
  idle_action?: Open<"stop" | "hibernate" | "hibernate-memory">;
  idle_since?: string;
  idle_action_at?: string;
  /** Exec sessions open on the answering node: while any is, the instance is not idle. */
  active_sessions?: number;
  /** GET of one instance only: the project's current, a newer base this instance does not run. */
  newer_current?: number;
  /** Why the instance runs on its node (the placement decision). */
  placement?: string;
}

/** Go: types.CreateInstanceRequest. The body of POST /v1/projects/{p}/instances. */
export interface CreateInstanceRequest {
  /** 0 or absent = the project's current version. */
  version?: number;
  /** A Go duration; absent = server default; "none" = no expiry. */
  ttl?: string;
  retain?: boolean;
  /** Start from checkpoint N (its version, volumes restored first); version must be absent. */
  checkpoint?: number;
  /** Only nodes with every one of these labels take it. */
  node_selector?: Record<string, string>;
}

/** Go: types.ExecRequest. The body of POST /v1/instances/{i}/exec. */
export interface ExecRequest {
  args: string[];
  env?: string[];
  cwd?: string;
  stdin?: string;
  /** A Go duration; absent = 10m. */
  timeout?: string;
  /** Fences the request: anything but the newest generation is stale_generation. */
  generation?: number;
  /** Start a stopped or hibernated instance first (503 waking past the wake wait). */
  wake?: boolean;
}

/** Go: types.ExecResult. */
export interface ExecResult {
  exit_code: number;
  stdout: string;
  stderr: string;
  truncated?: boolean;
  oom_killed?: boolean;
}

/** Go: types.SaveRequest. The body of POST /v1/instances/{i}/save. */
export interface SaveRequest {
  message?: string;
  expected_current?: number;
  generation?: number;
}

/** Go: types.SaveResult. The result of a save operation. */
export interface SaveResult {
  project: string;
  version: number;
  current: boolean;
  conflict: boolean;
  expected_current: number;
  image: string;
  freeze_ms: number;
  spool_ms: number;
  encode_ms: number;
  push_ms: number;
  commit_ms: number;
  total_ms: number;
  layer_bytes: number;
  entries: number;
  compression: string;
}

/** Go: types.Op* constants. */
export type OperationState = Open<"pending" | "running" | "succeeded" | "failed" | "canceled">;

/** Operation kinds (docs/api.md, Operations). */
export type OperationKind = Open<"save" | "restore" | "build" | "migrate" | "gc" | "fork" | "checkpoint" | "rollout" | "rollback">;

/** Go: types.OpError. */
export interface OperationError {
  code: ErrorCode;
  message: string;
}

/**
 * Go: types.Operation. `result` depends on `kind`: SaveResult, Instance
 * (restore), BuildResult, MigrateResult, GCResult.
 */
export interface Operation<R = unknown> {
  id: string;
  kind: OperationKind;
  target: string;
  state: OperationState;
  result?: R;
  error?: OperationError;
  created_at: string;
  updated_at: string;
}

/** Go: types.Event. One entry of an operation's ordered log. */
export interface OperationEvent {
  seq: number;
  at: string;
  type: string;
  message: string;
  data?: unknown;
}

/** Go: types.HibernateRequest. The optional body of POST /v1/instances/{i}/hibernate. */
export interface HibernateRequest {
  /** Hibernate a Running instance with its processes (gvisor class only). */
  memory?: boolean;
}

/**
 * Go: types.InstanceVerb. One entry of the server's list of plain verbs
 * (api/types/instance_verbs.json), each called with Instances.instanceVerb.
 */
export interface InstanceVerb {
  /** The last segment of POST /v1/instances/{i}/{name}. */
  name: string;
  /** The states the verb may start from. */
  from: InstanceState[];
  /** The state it leaves the instance in. */
  to: InstanceState;
  summary: string;
}

/** Go: types.RenewRequest. */
export interface RenewRequest {
  /** A Go duration from now, or "none". */
  ttl: string;
}

/** Go: types.TermSize. */
export interface TermSize {
  cols: number;
  rows: number;
}

/** Go: types.Quota. The body of PUT /v1/admin/tenants/{t}/quota. */
export interface Quota {
  max_instances?: number;
  max_versions?: number;
  max_stored_bytes?: number;
  max_ttl?: string;
  max_memory_bytes?: number;
  max_pids?: number;
  max_cpus?: number;
  max_disk_bytes?: number;
  /** A Go duration: the longest idle setting of the tenant's projects. */
  max_idle_after?: string;
  /** The runtime classes its projects and instances may use; absent = any. */
  runtime_classes?: RuntimeClass[];
}

/** Go: types.Usage. */
export interface Usage {
  tenant: string;
  instances: number;
  stored_bytes: number;
  version_bytes: number;
  volume_bytes: number;
  disk_bytes: number;
  versions: Record<string, number> | null;
  quota: Quota;
  /** What the checkpoints' volume archives store (part of stored_bytes). */
  checkpoint_bytes: number;
}

/** Go: types.CreateTokenRequest. */
export interface CreateTokenRequest {
  admin?: boolean;
  /** A Go duration ("720h"); absent = never expires. */
  expires_in?: string;
}

/** Go: types.Token. Shown only once, at creation. */
export interface Token {
  tenant: string;
  token: string;
  admin: boolean;
  id?: number;
  created_at?: string;
  expires_at?: string;
}

/** Go: types.TokenInfo. */
export interface TokenInfo {
  id: number;
  tenant: string;
  admin: boolean;
  created_at: string;
  expires_at?: string;
  revoked_at?: string;
  last_used_at?: string;
}

/** Go: types.BuildRequest. The body of POST /v1/projects/{p}/builds. */
export interface BuildRequest {
  manager?: Open<"apt" | "apk">;
  packages?: string[];
  validate?: string[][];
  from?: number;
  switch?: boolean;
  sources?: BuildSources;
  files?: BuildFile[];
  env?: Record<string, string>;
  run?: BuildStep[];
  context?: string;
  /** A Dockerfile build (run by the node's BuildKit) instead of envd's spec. */
  dockerfile?: DockerfileBuild;
}

/** Go: types.DockerfileBuild. */
export interface DockerfileBuild {
  content: string;
  args?: Record<string, string>;
  target?: string;
}

/** Go: types.BuildResult. */
export interface BuildResult {
  project: string;
  version: number;
  from: number;
  key: string;
  cached: boolean;
  current: boolean;
  conflict?: boolean;
  build_ms: number;
  validated: number;
}

/** Go: types.MigrateRequest. The body of POST /v1/projects/{p}/migrations. */
export interface MigrateRequest {
  base: string;
  validate?: string[][];
  switch?: boolean;
  mode?: Open<"rebase" | "rebuild">;
}

/** Go: types.MigrateResult. */
export interface MigrateResult {
  project: string;
  version: number;
  from: number;
  old_base: string;
  new_base: string;
  conflicts: string[];
  database_conflict: boolean;
  validated: number;
  current: boolean;
  conflict?: boolean;
  mode?: Open<"rebase" | "rebuild">;
}

/** Go: types.Limits. The body of PUT /v1/projects/{p}/limits. */
export interface Limits {
  memory_bytes?: number;
  pids?: number;
  cpus?: number;
  cpu_weight?: number;
  io_weight?: number;
  disk_bytes?: number;
  allow_privilege_escalation?: boolean;
}

/** Go: types.ProjectNetwork. The body of PUT /v1/projects/{p}/network. */
export interface ProjectNetwork {
  egress: string;
  isolate_instances?: boolean;
}

/** Go: types.EgressDenial. A refusal of the node's egress gateway. */
export interface EgressDenial {
  id: number;
  time: string;
  instance: string;
  kind: "dns" | "tls" | "http" | "connect" | string;
  name?: string;
  dest?: string;
  reason: string;
}

/** Go: types.SetSecretRequest. The value is write-only: no answer carries it. */
export interface SetSecretRequest {
  value: string;
}

/** Go: types.ProjectDocker. The body of PUT /v1/projects/{p}/docker. */
export interface ProjectDocker {
  docker: boolean;
}

/** Go: types.ProjectRuntimeClass. The body of PUT /v1/projects/{p}/runtime-class; "" = each node's default. */
export interface ProjectRuntimeClass {
  runtime_class: RuntimeClass | "";
}

/** A JSON-RPC 2.0 message of the Model Context Protocol, the body of POST /mcp (no Go type: api/mcp speaks the MCP library's). */
export interface MCPMessage {
  jsonrpc: "2.0";
  id?: string | number;
  method: string;
  params?: Record<string, unknown>;
}

/** The JSON-RPC 2.0 answer of POST /mcp (no Go type, as MCPMessage). */
export interface MCPResponse {
  jsonrpc: "2.0";
  id?: string | number;
  result?: Record<string, unknown>;
  error?: { code: number; message: string; data?: unknown };
}

/** Go: types.SecretBinding. scheme "http" (default): plain HTTP requests; "https": HTTPS requests, TLS terminated at the node's egress proxy. */
export interface SecretBinding {
  host: string;
  header?: string;
  format?: string;
  scheme?: "" | "http" | "https";
}

/** Go: types.Secret. Never carries the value. */
export interface Secret {
  name: string;
  binding?: SecretBinding;
  created_at: string;
  updated_at: string;
}

/** Stable error codes (Go: api/errdefs; docs/api.md, Errors). */
export type ErrorCode = Open<
  | "invalid_argument"
  | "unauthenticated"
  | "permission_denied"
  | "not_found"
  | "already_exists"
  | "stale_generation"
  | "conflict"
  | "failed_precondition"
  | "idempotency_key_reused"
  | "canceled"
  | "internal"
  | "unavailable"
  | "deadline_exceeded"
  | "quota_exceeded"
  | "resource_exhausted"
  | "start_failed"
  | "interrupted"
  | "waking"
  | "port_unreachable"
  | "too_large"
  | "volume_elsewhere"
  | "memory_checkpoint_unsupported"
  | "join_token_invalid"
  | "insufficient_capacity"
>;

/** Go: types.ErrorDetail. */
export interface ErrorDetail {
  code: ErrorCode;
  message: string;
  details?: Record<string, unknown>;
  /** The request's id (also the X-Request-Id answer header); quote it when reporting a problem. */
  request_id?: string;
}

/** Go: types.ErrorBody. The JSON body of every error answer. */
export interface ErrorBody {
  error: ErrorDetail;
}

/** Go: types.ExecExit. The payload of the exec stream's exit message. */
export interface ExecExit {
  exit_code: number;
  error?: ErrorDetail;
}

/** Go: types.Changes. GET .../versions/{n}/changes and GET /v1/instances/{i}/changes. */
export interface Changes {
  project: string;
  /** The newer version; 0 for what a save of `instance` would capture. */
  version: number;
  instance?: string;
  against: number;
  packages?: PackageChanges;
  added: FileChange[];
  modified: FileChange[];
  deleted: FileChange[];
  summarized: DirSummary[];
  top_dirs: DirBytes[];
  totals: ChangeTotals;
  truncated?: boolean;
  excluded?: ExcludedPath[];
}

/** Go: types.PackageChanges. */
export interface PackageChanges {
  manager: Open<"dpkg" | "apk">;
  added: Package[];
  removed: Package[];
  upgraded: PackageUpgrade[];
}

/** Go: types.Package. */
export interface Package {
  name: string;
  version: string;
  arch?: string;
}

/** Go: types.PackageUpgrade. */
export interface PackageUpgrade {
  name: string;
  from: string;
  to: string;
}

/** Go: types.FileChange. */
export interface FileChange {
  path: string;
  type: Open<"file" | "dir" | "symlink" | "hardlink" | "char" | "block" | "fifo">;
  size: number;
  /** Permission bits in octal, e.g. "0644". */
  mode: string;
  uid: number;
  gid: number;
  link?: string;
  was?: FileState;
}

/** Go: types.FileState. */
export interface FileState {
  type: string;
  size: number;
  mode: string;
  uid: number;
  gid: number;
  link?: string;
}

/** Go: types.DirSummary. */
export interface DirSummary {
  path: string;
  reason: string;
  added: number;
  modified: number;
  deleted: number;
  bytes: number;
}

/** Go: types.DirBytes. */
export interface DirBytes {
  path: string;
  bytes: number;
  files: number;
}

/** Go: types.ChangeTotals. */
export interface ChangeTotals {
  added: number;
  modified: number;
  deleted: number;
  added_bytes: number;
}

/** Go: types.ExcludedPath. */
export interface ExcludedPath {
  path: string;
  reason: string;
}

/** Go: types.ForkRequest. The body of POST /v1/instances/{i}/fork. */
export interface ForkRequest {
  message?: string;
  /** Of the new instances. */
  ttl?: string;
  /** Of the new instances. */
  retain?: boolean;
  /**
   * Fork the running processes too: one checkpoint with memory, which every
   * new instance continues (gvisor runtime class only; else
   * memory_checkpoint_unsupported).
   */
  memory?: boolean;
  /** How many new instances, 1 to 16 (Go: types.MaxForkCount); default 1. */
  count?: number;
}

/** Go: types.ForkResult. The result of a fork operation. */
export interface ForkResult {
  project: string;
  version: number;
  /** The first of instances. */
  instance: Instance;
  /** All the new instances, each with its own id, address and generation. */
  instances: Instance[];
  /** Memory forks: the checkpoint with memory the instances continue. */
  checkpoint?: number;
}

/**
 * Go: types.IdleSetting. The body of PUT /v1/projects/{p}/idle: instances
 * Running `after` without activity are stopped (retained, `stop`) or saved
 * as a non-current version and stopped. Empty fields = the node's defaults;
 * after "0" = never.
 */
export interface IdleSetting {
  after?: string;
  action?: Open<"stop" | "hibernate" | "hibernate-memory" | "">;
}

/** Go: types.PoolSetting. A project's warm pool (PUT /v1/projects/{p}/pool): started instances of the current version kept ready, 0 to 20. */
export interface PoolSetting {
  size: number;
}

// ---- Files, ports, SSH keys, rollouts, readiness (SDK parity) ----

/** File types of FileInfo.type; an open set. */
export type FileType = Open<"file" | "dir" | "symlink" | "fifo" | "socket" | "char" | "block">;

/** Go: types.FileInfo. One entry of a listing, or the answer of a write, mkdir, move or copy. */
export interface FileInfo {
  name: string;
  path: string;
  type: FileType;
  size: number;
  /** Octal permission bits with setuid/setgid/sticky, e.g. "0644". */
  mode: string;
  mtime: string;
  uid: number;
  gid: number;
  link_target?: string;
}

/** Go: types.FileList. A directory's listing (GET .../files of a directory). */
export interface FileList {
  path: string;
  entries: FileInfo[];
  /** The instance is stopped and read from its retained layer, read-only. */
  read_only?: boolean;
  /** Set when the directory has entries after this page: pass it as page_token. */
  next_page_token?: string;
}

/** Go: types.FileMkdirRequest. The body of POST .../files/mkdir. */
export interface FileMkdirRequest {
  path: string;
  mode?: string;
  parents?: boolean;
}

/** Go: types.FileMoveRequest. The body of POST .../files/move and .../files/copy. */
export interface FileMoveRequest {
  from: string;
  to: string;
  overwrite?: boolean;
}

/** Go: types.FileArchiveResult. The answer of POST .../files/archive. */
export interface FileArchiveResult {
  path: string;
  entries: number;
}

/** Go: types.FileEvent. One change seen by GET .../files/watch. */
export interface FileEvent {
  type: Open<"create" | "modify" | "delete" | "move" | "overflow">;
  path: string;
  /** The old path of a move. */
  from?: string;
  dir?: boolean;
  time: string;
}

/** Go: types.ListeningPort. A TCP port an instance listens on. */
export interface ListeningPort {
  address: string;
  port: number;
  protocol: Open<"tcp" | "tcp6">;
  public: boolean;
  /** The preview URL (host form), when the node has a preview domain. */
  url?: string;
  /** The project names the port among its forwarded ports; label and scheme are its attributes there. */
  forwarded?: boolean;
  label?: string;
  scheme?: Open<"http" | "https">;
}

/** Go: types.PortList. The answer of GET /v1/instances/{i}/ports. */
export interface PortList {
  ports: ListeningPort[];
}

/** Go: types.PreviewTokenRequest. The body of POST .../ports/{port}/token. */
export interface PreviewTokenRequest {
  /** A Go duration; default the server's (1h). */
  ttl?: string;
}

/** Go: types.PreviewToken. A preview token and, with a preview domain, its URL. */
export interface PreviewToken {
  url?: string;
  token: string;
  host?: string;
  expires_at: string;
}

/** Go: types.ProjectPorts. GET/PUT /v1/projects/{p}/ports. */
export interface ProjectPorts {
  /** Ports reachable through the preview host without a token. */
  public: number[];
  /**
   * The ports the project names for its tools (a devcontainer.json's forwardPorts). In a PUT,
   * absent keeps them and a list (even empty) replaces them; answers omit it when there are none.
   * Forwarding gives no access: a port that is not public still needs a preview token.
   */
  forwarded?: ForwardedPort[];
}

/** Go: types.ForwardedPort. One of a project's forwarded ports. */
export interface ForwardedPort {
  port: number;
  label?: string;
  /** How a browser opens it; absent = http. */
  scheme?: Open<"http" | "https">;
}

/** Go: types.SSHKey. A public key of the caller's tenant. */
export interface SSHKey {
  id: number;
  name: string;
  fingerprint: string;
  public_key: string;
  created_at: string;
}

/** Go: types.AddSSHKeyRequest. The body of POST /v1/ssh-keys. */
export interface AddSSHKeyRequest {
  /** authorized_keys form ("ssh-ed25519 AAAA... comment"). */
  public_key: string;
  name?: string;
}

/** Rollout states; an open set. */
export type RolloutState = Open<"running" | "paused" | "succeeded" | "stopped_budget" | "failed" | "canceled" | "rolling_back" | "rolled_back">;

/** Go: types.CreateRolloutRequest. The body of POST /v1/admin/rollouts. */
export interface CreateRolloutRequest {
  /** The base image projects are on now (a name or repo@digest). */
  from: string;
  /** The base image to move them to. */
  to: string;
  tenant?: string;
  selector?: string;
  validate?: string[][];
  wave_size?: number;
  max_failures?: number;
  dry_run?: boolean;
  allow_conflicts?: boolean;
}

/** Go: types.Rollout. A fleet upgrade (admin). */
export interface Rollout {
  id: string;
  operation_id: string;
  /** The operation (kind rollback) of its newest rollback; absent before one was asked. */
  rollback_operation_id?: string;
  state: RolloutState;
  message?: string;
  from: string;
  to: string;
  from_name?: string;
  to_name?: string;
  tenant?: string;
  selector?: string;
  validate?: string[][];
  wave_size: number;
  max_failures: number;
  dry_run: boolean;
  allow_conflicts: boolean;
  totals: Record<string, number>;
  /** Only in GET /v1/admin/rollouts/{id}. */
  projects?: RolloutProject[];
  created_at: string;
  updated_at: string;
  finished_at?: string;
}

/** Go: types.RolloutProject. One project of a rollout. */
export interface RolloutProject {
  tenant: string;
  project: string;
  status: Open<"pending" | "running" | "switched" | "validation_failed" | "conflicts" | "skipped" | "rolled_back" | "failed" | "clean">;
  old_version: number;
  new_version?: number;
  conflicts: string[];
  database_conflict?: boolean;
  message?: string;
  output?: string;
  started_at?: string;
  finished_at?: string;
}

/** Go: types.ProjectValidation. The body of PUT /v1/projects/{p}/validation. */
export interface ProjectValidation {
  /** Commands (argv, no shell) every migration of the project runs in its trial instance. */
  validate: string[][];
}

/** Go: types.Readiness. The answer of GET /readyz (200 ready, 503 not_ready). */
export interface Readiness {
  status: Open<"ready" | "not_ready">;
  checks: Record<string, Check>;
}

/** Go: types.Check. One check of GET /readyz. */
export interface Check {
  status: Open<"ok" | "failed">;
  error?: string;
  duration_ms: number;
}

/** Go: types.CheckpointRequest. The body of POST /v1/instances/{i}/checkpoint. */
export interface CheckpointRequest {
  message?: string;
  /** Make the version current by compare-and-swap; default: current is left alone. */
  set_current?: boolean;
  /** Also capture the instance's processes (gvisor class only; else memory_checkpoint_unsupported). */
  memory?: boolean;
}

/** Go: types.CheckpointMemory. A checkpoint's memory image in the registry. */
export interface CheckpointMemory {
  image: string;
  bytes: number;
  new_bytes: number;
  freeze_ms: number;
  resumed_by?: string;
}

/** Go: types.CheckpointVolume. A checkpoint's archive of one volume. */
export interface CheckpointVolume {
  volume: string;
  key: string;
  bytes: number;
  files: number;
}

/** Go: types.Checkpoint. The rootfs (a version) and the volumes (archives) of one freeze. */
export interface Checkpoint {
  id: number;
  project: string;
  version: number;
  instance: string;
  message?: string;
  volumes: CheckpointVolume[] | null;
  version_bytes: number;
  volume_bytes: number;
  bytes: number;
  freeze_ms: number;
  node: string;
  created_at: string;
  memory?: CheckpointMemory;
}

/** Go: types.CheckpointResult. The result of a checkpoint operation. */
export interface CheckpointResult {
  checkpoint: Checkpoint;
  current: boolean;
  conflict?: boolean;
  freeze_ms: number;
  volume_freeze_ms: number;
  archive_ms: number;
  total_ms: number;
  memory_push_ms?: number;
}

/** Go: types.GCCheckpoint. A checkpoint a GC deleted with its version and archives. */
export interface GCCheckpoint {
  tenant: string;
  project: string;
  id: number;
  version: number;
  archives: number;
  bytes: number;
}

/** Go: types.BuildSources. Written before a build installs its packages. */
export interface BuildSources {
  apt?: SourceFile[];
  apt_keys?: SourceFile[];
  apk?: string[];
  apk_keys?: SourceFile[];
}

/** Go: types.SourceFile. A sources list or key: text or base64 bytes. */
export interface SourceFile {
  name: string;
  content?: string;
  content_base64?: string;
}

/** Go: types.BuildFile. Written after the packages; one of content, content_base64, source. */
export interface BuildFile {
  path: string;
  content?: string;
  content_base64?: string;
  source?: string;
  mode?: string;
}

/** Go: types.BuildStep. An argv run without a shell; with shell, one script for sh -c. */
export interface BuildStep {
  args: string[];
  shell?: boolean;
  dir?: string;
}

/** Go: types.BuildContext. The answer of POST /v1/projects/{p}/build-contexts. */
export interface BuildContext {
  context: string;
  size_bytes: number;
  files: number;
}

/** Go: types.SpecOmit. A change a derived spec does not reproduce. */
export interface SpecOmit {
  path: string;
  reason: string;
}

/** Go: types.VersionSpec. The answer of GET /v1/projects/{p}/versions/{n}/spec. */
export interface VersionSpec {
  project: string;
  version: number;
  kind: string;
  declared: boolean;
  base: string;
  base_version: number;
  spec: BuildRequest;
  omitted: SpecOmit[];
}

/** Go: types.NodeCapacity. 0 = not known; instance_slots 0 = no bound (in used: the live instances). */
export interface NodeCapacity {
  cpus: number;
  memory_bytes: number;
  disk_bytes: number;
  instance_slots: number;
}

/** Go: types.Node. A member of the cluster. */
export interface Node {
  name: string;
  api_url: string;
  state: Open<"ready" | "cordoned" | "draining" | "drained" | "lost">;
  labels: Record<string, string>;
  capacity: NodeCapacity;
  used: NodeCapacity;
  instances: number;
  lease_seconds: number;
  /** Set by the database's clock at every renewal. */
  lease_expires_at: string;
  expired?: boolean;
  renewed_at: string;
  started_at: string;
  state_changed_at: string;
  version?: string;
  stopped?: boolean;
}

/** Go: types.NodeList. The answer of GET /v1/nodes. */
export interface NodeList {
  nodes: Node[];
}

/** Go: types.JoinCommand. Holds credentials: admins only. */
export interface JoinCommand {
  command: string;
  args: string[];
  secrets?: string[];
  notes?: string[];
}

/** Go: types.CheckpointSetting. A Go duration of at least 10s; "0" = never. */
export interface CheckpointSetting {
  every: string;
}

/** Go: types.JoinTokenRequest. ttl: a Go duration from 1m to 168h; default 1h. */
export interface JoinTokenRequest {
  ttl?: string;
}

/** Go: types.JoinToken. The token is shown once and used once. */
export interface JoinToken {
  token: string;
  expires_at: string;
  command: string;
  args: string[];
}

/** Go: types.JoinRequest. */
export interface JoinRequest {
  node: string;
}

/** Go: types.JoinS3. */
export interface JoinS3 {
  endpoint: string;
  bucket: string;
  region?: string;
  secure?: boolean;
  access_key: string;
  secret_key: string;
}

/** Go: types.JoinConfig. The cluster's settings with their credentials. */
export interface JoinConfig {
  database: string;
  registry?: string;
  registry_credential?: string;
  registry_s3?: JoinS3;
  s3?: JoinS3;
  lease?: string;
  notes?: string[];
}

/** Go: types.WebhookRequest. The body of POST /v1/webhooks. */
export interface WebhookRequest {
  /** http:// or https://. */
  url: string;
  /** instance.state, operation.<kind>, quota.refused, rollout.step, family.* or *; absent = *. */
  events?: string[];
  description?: string;
}

/** Go: types.Webhook. A tenant's webhook; secret only in the answer of its creation. */
export interface Webhook {
  id: string;
  url: string;
  events: string[];
  description?: string;
  /** The HMAC-SHA256 key of Envd-Webhook-Signature, shown once. */
  secret?: string;
  created_at: string;
}

/** Go: types.WebhookDelivery. One event sent (or to send) to a webhook. */
export interface WebhookDelivery {
  id: number;
  webhook: string;
  event: Event;
  /** pending, delivered or failed (given up). */
  state: string;
  attempts: number;
  next_attempt_at?: string;
  last_error?: string;
  response_code?: number;
  created_at: string;
  finished_at?: string;
}
