import { EnvdError, errorFromDetail, errorFromResponse, isPermanent, makeError, parseRetryAfter, statusOfCode } from "./errors.js";
import { ExecSession, type ExecStreamOptions } from "./exec.js";
import {
  abortError,
  esc,
  linkSignals,
  newIdempotencyKey,
  sleep,
  Transport,
  type CallOptions,
  type ClientOptions,
  type CreateOptions,
} from "./http.js";
import { parseSSE } from "./sse.js";
import { Files } from "./files.js";
import { ByteStream, Ports, Rollouts, SSH_SUBPROTOCOL, SshKeys, Webhooks } from "./ports.js";
import type * as T from "./types.js";

/** Options of waiting for an operation and of its event stream. */
export interface EventStreamOptions {
  /** Start after this event (a seq seen before, for example by another process). Default: 0. */
  after?: number;
  /** Stops waiting (never cancels the operation). */
  signal?: AbortSignal;
  /**
   * Called before each reconnect, with the last seq seen and the reason:
   * the stream resumes from there (Last-Event-ID), without gaps or repeats.
   */
  onReconnect?: (lastSeq: number, reason: unknown) => void;
  /**
   * A stream that delivers nothing (not even the server's keep-alive
   * comment, every 15 s) for this long is taken as dropped. Default: 45000.
   */
  idleTimeoutMs?: number;
  /** How many reconnects in a row without a new event before falling back to polling. Default: 5. */
  maxReconnects?: number;
}

export interface WaitOptions extends EventStreamOptions {
  /** Called for each event of the operation's log, in order, each exactly once. */
  onEvent?: (ev: T.OperationEvent) => void;
}

const permanentOrAbort = (e: unknown, signal?: AbortSignal) => signal?.aborted || isPermanent(e);

/** The error of a finished operation that did not succeed. */
export function operationError(op: T.Operation): EnvdError {
  if (op.error) {
    const e = errorFromDetail(statusOfCode(op.error.code), { code: op.error.code, message: op.error.message });
    return e;
  }
  return makeError(statusOfCode("internal"), op.state === "canceled" ? "canceled" : "internal", `operation ${op.id} ended ${op.state}`);
}

export function isDone(op: T.Operation): boolean {
  return op.state === "succeeded" || op.state === "failed" || op.state === "canceled";
}

/**
 * A client of one envd server. Methods map one to one to the routes of
 * docs/api.md, grouped by resource: client.projects.create(...),
 * client.instances.exec(...), client.operations.wait(...).
 */
export class Client {
  readonly transport: Transport;
  readonly images: Images;
  readonly projects: Projects;
  readonly instances: Instances;
  readonly versions: Versions;
  readonly operations: Operations;
  readonly builds: Builds;
  readonly migrations: Migrations;
  readonly volumes: Volumes;
  readonly tokens: Tokens;
  readonly tenants: Tenants;
  readonly files: Files;
  readonly ports: Ports;
  readonly sshKeys: SshKeys;
  readonly rollouts: Rollouts;
  readonly secrets: Secrets;
  readonly webhooks: Webhooks;

  constructor(opts: ClientOptions) {
    const t = new Transport(opts);
    this.transport = t;
    this.operations = new Operations(t);
    this.images = new Images(t);
    this.projects = new Projects(t);
    this.instances = new Instances(t, this.operations);
    this.versions = new Versions(t);
    this.builds = new Builds(t);
    this.migrations = new Migrations(t);
    this.volumes = new Volumes(t);
    this.tokens = new Tokens(t);
    this.tenants = new Tenants(t);
    this.files = new Files(t);
    this.ports = new Ports(t);
    this.sshKeys = new SshKeys(t);
    this.rollouts = new Rollouts(t);
    this.secrets = new Secrets(t);
    this.webhooks = new Webhooks(t);
  }

  /** GET /healthz (no authentication needed). */
  healthz(opts?: CallOptions): Promise<{ status: string }> {
    return this.transport.json({ method: "GET", path: "/healthz", retry: "safe" }, opts);
  }

  /** GET /v1/info. */
  info(opts?: CallOptions): Promise<T.Info> {
    return this.transport.json({ method: "GET", path: "/v1/info", retry: "safe" }, opts);
  }

  /** POST /v1/admin/gc (admin token): a gc operation; its result is a GCResult. */
  gc(req: T.GCRequest = {}, opts: CreateOptions = {}): Promise<T.Operation<T.GCResult>> {
    return creating(this.transport, "/v1/admin/gc", req, opts);
  }

  /** Usage of the caller's tenant: GET /v1/usage. */
  usage(opts?: CallOptions): Promise<T.Usage> {
    return this.transport.json({ method: "GET", path: "/v1/usage", retry: "safe" }, opts);
  }

  /**
   * GET /readyz (no authentication): the node's checks. A node that is not
   * ready answers 503 with the same body: it is returned, not thrown.
   */
  async readyz(opts: CallOptions = {}): Promise<T.Readiness> {
    const t = this.transport;
    const link = linkSignals([opts.signal], opts.timeoutMs ?? t.o.timeoutMs);
    try {
      const res = await t.o.fetch(t.url("/readyz"), { headers: { Accept: "application/json" }, signal: link.signal });
      const text = await res.text();
      if (res.status === 200 || res.status === 503) {
        try {
          const r = JSON.parse(text) as T.Readiness;
          if (r && typeof r.status === "string") return r;
        } catch {
          // not a readiness body: an error below
        }
      }
      throw errorFromResponse(res.status, res.statusText, text, parseRetryAfter(res.headers.get("Retry-After")));
    } finally {
      link.done();
    }
  }

  /** GET /metrics (an admin or scrape token): the Prometheus text format. */
  metrics(opts?: CallOptions): Promise<string> {
    return this.transport.send(
      { method: "GET", path: "/metrics", headers: { Accept: "text/plain" }, retry: "safe" },
      opts ?? {},
      (res) => res.text(),
    );
  }

  /**
   * POST /mcp: one JSON-RPC 2.0 message of the Model Context Protocol
   * (e.g. `{ jsonrpc: "2.0", id: 1, method: "tools/list" }`) to the node's
   * MCP endpoint, with this client's token; the JSON-RPC answer (null for
   * a notification).
   */
  mcp(message: T.MCPMessage, opts?: CallOptions): Promise<T.MCPResponse | null> {
    return this.transport.json(
      { method: "POST", path: "/mcp", json: message, headers: { Accept: "application/json, text/event-stream" }, retry: "refused" },
      opts,
    );
  }

  /**
   * POST /v1/instances/{i}/checkpoint: a checkpoint operation (result:
   * CheckpointResult). The instance is frozen once; its rootfs becomes a
   * version (not current unless set_current) and every volume an archive,
   * recorded together. Start from it with instances.create(p, {checkpoint}).
   */
  checkpoint(id: string, req: T.CheckpointRequest = {}, opts: CreateOptions = {}): Promise<T.Operation<T.CheckpointResult>> {
    return creating(this.transport, `/v1/instances/${esc(id)}/checkpoint`, req, opts);
  }

  /** GET /v1/projects/{p}/checkpoints: newest first. */
  checkpoints(project: string, opts?: CallOptions): Promise<T.Checkpoint[]> {
    return get(this.transport, `/v1/projects/${esc(project)}/checkpoints`, opts);
  }

  /** GET /v1/projects/{p}/checkpoints/{id}. */
  getCheckpoint(project: string, id: number, opts?: CallOptions): Promise<T.Checkpoint> {
    return get(this.transport, `/v1/projects/${esc(project)}/checkpoints/${id}`, opts);
  }

  /** DELETE /v1/projects/{p}/checkpoints/{id}: with its archives, and its version unless kept otherwise. */
  deleteCheckpoint(project: string, id: number, opts?: CallOptions): Promise<T.Checkpoint> {
    return this.transport.json({ method: "DELETE", path: `/v1/projects/${esc(project)}/checkpoints/${id}`, retry: "safe" }, opts);
  }

  /**
   * GET /v1/projects/{p}/checkpoints/{id}/export: the checkpoint as an OCI
   * image layout tar, its version's image and (with memory) its memory image.
   */
  exportCheckpoint(project: string, id: number, opts?: CallOptions): Promise<ReadableStream<Uint8Array>> {
    return this.transport.send(
      { method: "GET", path: `/v1/projects/${esc(project)}/checkpoints/${id}/export`, headers: { Accept: "application/x-tar, application/json" }, retry: "safe", stream: true },
      opts ?? {},
      async (res) => res.body ?? new ReadableStream<Uint8Array>({ start: (c) => c.close() }),
    );
  }

  /**
   * POST /v1/projects/{p}/checkpoints/import: a checkpoint of the project from
   * a tar exportCheckpoint wrote (here or elsewhere). A corrupted tar is
   * invalid_argument (details.reason archive_corrupt); not retried once sent.
   */
  importCheckpoint(project: string, tar: Uint8Array | Blob | ArrayBuffer, opts?: CallOptions): Promise<T.Checkpoint> {
    const body = (tar instanceof ArrayBuffer ? new Uint8Array(tar) : tar) as unknown as BodyInit;
    return this.transport.json(
      { method: "POST", path: `/v1/projects/${esc(project)}/checkpoints/import`, body, contentType: "application/x-tar", retry: "refused" },
      opts,
    );
  }

  /** GET /v1/projects/{p}/versions/{n}/spec: a build spec that makes the version again (its `spec` is a BuildRequest). */
  versionSpec(project: string, n: number, opts?: CallOptions): Promise<T.VersionSpec> {
    return get(this.transport, `/v1/projects/${esc(project)}/versions/${esc(n)}/spec`, opts);
  }

  /** POST /v1/projects/{p}/build-contexts: keeps a tar as a build context; a BuildRequest names its `context`. */
  uploadBuildContext(project: string, tar: Uint8Array | Blob | ArrayBuffer, opts?: CallOptions): Promise<T.BuildContext> {
    const body = (tar instanceof ArrayBuffer ? new Uint8Array(tar) : tar) as unknown as BodyInit;
    return this.transport.json(
      { method: "POST", path: `/v1/projects/${esc(project)}/build-contexts`, body, contentType: "application/x-tar", retry: "safe" },
      opts,
    );
  }

  /** GET /v1/operations/{id}/logs: the operation's log (a build's output) as text. */
  operationLogs(id: string, opts: CallOptions = {}): Promise<string> {
    return this.transport.send({ method: "GET", path: `/v1/operations/${esc(id)}/logs`, retry: "safe" }, opts, (res) => res.text());
  }

  /** The cluster's nodes (admin token): list, get, cordon, uncordon, drain, joinCommand. */
  get nodes(): Nodes {
    return new Nodes(this.transport);
  }
}

/** A creating POST: sent with an Idempotency-Key (made here when not given) and retried with it. */
function creating<R>(t: Transport, path: string, body: unknown, opts: CreateOptions, headers: Record<string, string> = {}): Promise<R> {
  const key = opts.idempotencyKey ?? newIdempotencyKey();
  return t.json<R>({ method: "POST", path, json: body, headers: { ...headers, "Idempotency-Key": key }, retry: "safe" }, opts);
}

const get = <R>(t: Transport, path: string, opts?: CallOptions, query?: Record<string, string | undefined>) =>
  t.json<R>({ method: "GET", path, retry: "safe", ...(query ? { query } : {}) }, opts);

/** Body types accepted by images.import. */
export type TarSource = Blob | ReadableStream<Uint8Array> | Uint8Array | ArrayBuffer;

export class Images {
  constructor(private t: Transport) {}

  /** GET /v1/images. */
  list(opts?: CallOptions): Promise<T.Image[]> {
    return get(this.t, "/v1/images", opts);
  }

  /**
   * POST /v1/images?name=NAME: uploads a tar (plain or gzip, told apart by
   * its first bytes). A ReadableStream is sent as it is read and never retried.
   */
  async import(name: string, tar: TarSource, opts: CallOptions & { contentType?: string } = {}): Promise<T.Image> {
    let body: BodyInit;
    let head: Uint8Array;
    if (tar instanceof ArrayBuffer) tar = new Uint8Array(tar);
    if (tar instanceof Uint8Array) {
      body = tar as unknown as BodyInit;
      head = tar.subarray(0, 2);
    } else if (typeof Blob !== "undefined" && tar instanceof Blob) {
      body = tar;
      head = new Uint8Array(await tar.slice(0, 2).arrayBuffer());
    } else {
      const [peeked, stream] = await peekStream(tar as ReadableStream<Uint8Array>);
      body = stream;
      head = peeked;
    }
    const gz = head.length >= 2 && head[0] === 0x1f && head[1] === 0x8b;
    return this.t.json<T.Image>(
      {
        method: "POST",
        path: "/v1/images",
        query: { name },
        body,
        contentType: opts.contentType ?? (gz ? "application/gzip" : "application/x-tar"),
        retry: "refused",
      },
      opts,
    );
  }

  /**
   * POST /v1/images?name=NAME&ref=REF: copies an image from another OCI
   * registry (the node pulls it). Importing an OCI image layout is
   * import() with the layout's tar.
   */
  pull(name: string, ref: string, opts?: CallOptions): Promise<T.Image> {
    return this.t.json({ method: "POST", path: "/v1/images", query: { name, ref }, retry: "refused" }, opts);
  }
}

/** Reads a stream's first chunk(s) to see its first two bytes, and gives back a stream of the whole. */
async function peekStream(s: ReadableStream<Uint8Array>): Promise<[Uint8Array, ReadableStream<Uint8Array>]> {
  const reader = s.getReader();
  const first: Uint8Array[] = [];
  let n = 0;
  let done = false;
  while (n < 2) {
    const r = await reader.read();
    if (r.done) {
      done = true;
      break;
    }
    first.push(r.value);
    n += r.value.length;
  }
  const head = new Uint8Array(Math.min(n, 2));
  let off = 0;
  for (const c of first) {
    if (off >= head.length) break;
    const part = c.subarray(0, head.length - off);
    head.set(part, off);
    off += part.length;
  }
  const rest = new ReadableStream<Uint8Array>({
    start(ctl) {
      for (const c of first) ctl.enqueue(c);
      if (done) ctl.close();
    },
    async pull(ctl) {
      const r = await reader.read();
      if (r.done) ctl.close();
      else ctl.enqueue(r.value);
    },
    cancel(reason) {
      return reader.cancel(reason);
    },
  });
  return [head, rest];
}

export class Projects {
  constructor(private t: Transport) {}

  /** POST /v1/projects (with an Idempotency-Key, retried). */
  create(req: T.CreateProjectRequest, opts: CreateOptions = {}): Promise<T.Project> {
    return creating(this.t, "/v1/projects", req, opts);
  }

  /** GET /v1/projects. */
  list(opts?: CallOptions): Promise<T.Project[]> {
    return get(this.t, "/v1/projects", opts);
  }

  /** GET /v1/projects/{p}. */
  get(name: string, opts?: CallOptions): Promise<T.Project> {
    return get(this.t, `/v1/projects/${esc(name)}`, opts);
  }

  /** DELETE /v1/projects/{p}: 409 failed_precondition while instances are not Terminated. */
  async delete(name: string, opts?: CallOptions): Promise<void> {
    await this.t.json({ method: "DELETE", path: `/v1/projects/${esc(name)}`, retry: "safe" }, opts);
  }

  /** PUT /v1/projects/{p}/retention ({} keeps every version). */
  setRetention(name: string, r: T.Retention, opts?: CallOptions): Promise<T.Project> {
    return this.t.json({ method: "PUT", path: `/v1/projects/${esc(name)}/retention`, json: r, retry: "safe" }, opts);
  }

  /** PUT /v1/projects/{p}/limits ({} clears them). */
  setLimits(name: string, l: T.Limits, opts?: CallOptions): Promise<T.Project> {
    return this.t.json({ method: "PUT", path: `/v1/projects/${esc(name)}/limits`, json: l, retry: "safe" }, opts);
  }

  /** PUT /v1/projects/{p}/network. */
  setNetwork(name: string, n: T.ProjectNetwork, opts?: CallOptions): Promise<T.Project> {
    return this.t.json({ method: "PUT", path: `/v1/projects/${esc(name)}/network`, json: n, retry: "safe" }, opts);
  }

  /** GET /v1/projects/{p}/egress/log: what the egress gateway refused, newest first. */
  egressLog(name: string, q: { limit?: number; before?: number } = {}, opts?: CallOptions): Promise<T.EgressDenial[]> {
    const query = { limit: q.limit?.toString(), before: q.before?.toString() };
    return get(this.t, `/v1/projects/${esc(name)}/egress/log`, opts, query);
  }

  /** PUT /v1/projects/{p}/runtime-class: the class of instances made from now on; "" = each node's default. */
  setRuntimeClass(name: string, runtimeClass: T.RuntimeClass | "", opts?: CallOptions): Promise<T.Project> {
    return this.t.json({ method: "PUT", path: `/v1/projects/${esc(name)}/runtime-class`, json: { runtime_class: runtimeClass }, retry: "safe" }, opts);
  }

  /** PUT /v1/projects/{p}/docker: instances made from now on may run dockerd (runtime class gvisor only; else 409 failed_precondition). */
  setDocker(name: string, docker: boolean, opts?: CallOptions): Promise<T.Project> {
    return this.t.json({ method: "PUT", path: `/v1/projects/${esc(name)}/docker`, json: { docker }, retry: "safe" }, opts);
  }

  /** PUT /v1/projects/{p}/idle: idle stop of the project's instances; {} = the node's default. */
  setIdle(name: string, idle: T.IdleSetting, opts?: CallOptions): Promise<T.Project> {
    return this.t.json({ method: "PUT", path: `/v1/projects/${esc(name)}/idle`, json: idle, retry: "safe" }, opts);
  }

  /** PUT /v1/projects/{p}/pool: keep `size` started instances of the current version ready for `up` (0 = none). */
  setPool(name: string, pool: T.PoolSetting, opts?: CallOptions): Promise<T.Project> {
    return this.t.json({ method: "PUT", path: `/v1/projects/${esc(name)}/pool`, json: pool, retry: "safe" }, opts);
  }

  /** The validation commands of the project (its `validate`, read with GET /v1/projects/{p}; there is no GET .../validation). */
  async validation(name: string, opts?: CallOptions): Promise<T.ProjectValidation> {
    const p = await this.get(name, opts);
    return { validate: p.validate ?? [] };
  }

  /** PUT /v1/projects/{p}/validation: the commands every migration of the project runs in its trial instance ({validate: []} clears them). */
  setValidation(name: string, v: T.ProjectValidation, opts?: CallOptions): Promise<T.Project> {
    return this.t.json({ method: "PUT", path: `/v1/projects/${esc(name)}/validation`, json: v, retry: "safe" }, opts);
  }
}

export class Instances {
  constructor(
    private t: Transport,
    private ops: Operations,
  ) {}

  /**
   * POST /v1/projects/{p}/instances: answers when the instance is Running
   * (a Failed one is an error). With an Idempotency-Key, retried.
   */
  create(project: string, req: T.CreateInstanceRequest = {}, opts: CreateOptions = {}): Promise<T.Instance> {
    return creating(this.t, `/v1/projects/${esc(project)}/instances`, req, opts);
  }

  /**
   * The same with Prefer: respond-async: a restore operation at once
   * (target = the new instance's id; result = the instance, Running).
   */
  createAsync(project: string, req: T.CreateInstanceRequest = {}, opts: CreateOptions = {}): Promise<T.Operation<T.Instance>> {
    return creating(this.t, `/v1/projects/${esc(project)}/instances`, req, opts, { Prefer: "respond-async" });
  }

  /**
   * Starts an instance as an operation and waits for it, reporting its
   * events: createAsync + operations.result. Throws the operation's error
   * when the restore fails.
   */
  async up(project: string, req: T.CreateInstanceRequest = {}, opts: CreateOptions & WaitOptions = {}): Promise<T.Instance> {
    const op = await this.createAsync(project, req, opts);
    return this.ops.result<T.Instance>(op.id, opts);
  }

  /** GET /v1/projects/{p}/instances, or GET /v1/instances (all projects) without a project. */
  list(project?: string, opts?: CallOptions): Promise<T.Instance[]> {
    return get(this.t, project ? `/v1/projects/${esc(project)}/instances` : "/v1/instances", opts);
  }

  /** One page of GET /v1/instances (or a project's): pass the page's nextPageToken to get the next one; "" after the last. */
  listPage(project: string | undefined, page: PageRequest = {}, opts?: CallOptions): Promise<Page<T.Instance>> {
    return getPage(this.t, project ? `/v1/projects/${esc(project)}/instances` : "/v1/instances", page, opts);
  }

  /** GET /v1/instances/{i}. */
  get(id: string, opts?: CallOptions): Promise<T.Instance> {
    return get(this.t, `/v1/instances/${esc(id)}`, opts);
  }

  /** DELETE /v1/instances/{i}: Terminated; deleting again answers it again. */
  delete(id: string, opts?: CallOptions): Promise<T.Instance> {
    return this.t.json({ method: "DELETE", path: `/v1/instances/${esc(id)}`, retry: "safe" }, opts);
  }

  private verb(id: string, verb: string, body: unknown, opts?: CallOptions): Promise<T.Instance> {
    // A verb is a compare-and-swap on the state: it is not repeated after a
    // network error (the first may have worked), only after a 429.
    return this.t.json({ method: "POST", path: `/v1/instances/${esc(id)}/${verb}`, json: body, retry: "refused" }, opts);
  }

  /**
   * POST .../{name}: a plain verb, without a body, answered with the
   * instance (the server's list, api/types/instance_verbs.json: stop,
   * start, pause, resume, ...). A verb the server does not serve is a
   * NotFound. The named methods below are this with their name.
   */
  instanceVerb(id: string, name: string, opts?: CallOptions): Promise<T.Instance> {
    return this.verb(id, esc(name), undefined, opts);
  }
  /** POST .../stop (a retained instance). */
  stop(id: string, opts?: CallOptions): Promise<T.Instance> {
    return this.instanceVerb(id, "stop", opts);
  }
  /** POST .../start (generation + 1). */
  start(id: string, opts?: CallOptions): Promise<T.Instance> {
    return this.instanceVerb(id, "start", opts);
  }
  /** POST .../pause. */
  pause(id: string, opts?: CallOptions): Promise<T.Instance> {
    return this.instanceVerb(id, "pause", opts);
  }
  /** POST .../resume. */
  resume(id: string, opts?: CallOptions): Promise<T.Instance> {
    return this.instanceVerb(id, "resume", opts);
  }
  /** POST .../renew: expires_at = now + ttl (a Go duration), or none with "none". */
  renew(id: string, ttl: string, opts?: CallOptions): Promise<T.Instance> {
    return this.verb(id, "renew", { ttl } satisfies T.RenewRequest, opts);
  }
  /**
   * POST .../hibernate: a stopped retained instance's layer is saved as a
   * version; with `{ memory: true }` a Running instance is hibernated with
   * its processes, which any access resumes (a MemoryCheckpointUnsupported
   * error, 409, where they cannot be kept; nothing changes then).
   */
  hibernate(id: string, req?: T.HibernateRequest, opts?: CallOptions): Promise<T.Instance> {
    return this.verb(id, "hibernate", req?.memory ? req : undefined, opts);
  }

  /**
   * POST /v1/instances/{i}/exec: runs the command to its end. A non-zero
   * exit code is not an error; a timeout is a DeadlineExceededError.
   */
  exec(id: string, req: T.ExecRequest, opts?: CallOptions): Promise<T.ExecResult> {
    return this.t.json({ method: "POST", path: `/v1/instances/${esc(id)}/exec`, json: req, retry: "refused" }, opts);
  }

  /** GET /v1/instances/{i}/exec/ws: a streaming (optionally interactive) exec over a WebSocket. */
  execStream(id: string, opts: ExecStreamOptions): ExecSession {
    return new ExecSession(this.t, id, opts);
  }

  /**
   * POST /v1/instances/{i}/save: a save operation (result: SaveResult).
   * With an Idempotency-Key, retried: a retry answers the same operation.
   */
  save(id: string, req: T.SaveRequest = {}, opts: CreateOptions = {}): Promise<T.Operation<T.SaveResult>> {
    return creating(this.t, `/v1/instances/${esc(id)}/save`, req, opts);
  }

  /**
   * POST /v1/instances/{i}/fork: a fork operation (result: ForkResult). The
   * instance is saved as a version that is not current and new instances
   * (`count`, default 1) start from it; the first runs on untouched. With
   * `memory: true` (gvisor class) the new instances continue its processes.
   */
  fork(id: string, req: T.ForkRequest = {}, opts: CreateOptions = {}): Promise<T.Operation<T.ForkResult>> {
    return creating(this.t, `/v1/instances/${esc(id)}/fork`, req, opts);
  }

  /**
   * GET /v1/instances/{i}/ssh: an SSH connection to the node's SSH
   * endpoint, logged in with the client's token and bound to the instance,
   * as a byte stream for an SSH client library (the first bytes are the
   * server's "SSH-2.0-" banner).
   */
  ssh(id: string, opts: { signal?: AbortSignal } = {}): ByteStream {
    // The server checks the instance after the "is it an upgrade" check a
    // plain probe fails; reading the instance tells why it was refused.
    const explain = async (): Promise<EnvdError | undefined> => {
      try {
        await this.get(id, { signal: opts.signal });
      } catch (e) {
        if (e instanceof EnvdError) return e;
      }
      return undefined;
    };
    return new ByteStream(this.t, `/v1/instances/${esc(id)}/ssh`, SSH_SUBPROTOCOL, opts.signal, explain);
  }
}

export class Versions {
  constructor(private t: Transport) {}

  /** GET /v1/projects/{p}/versions. */
  list(project: string, opts?: CallOptions): Promise<T.Version[]> {
    return get(this.t, `/v1/projects/${esc(project)}/versions`, opts);
  }

  /** One page of GET /v1/projects/{p}/versions, by number: pass nextPageToken for the next; "" after the last. */
  listPage(project: string, page: PageRequest = {}, opts?: CallOptions): Promise<Page<T.Version>> {
    return getPage(this.t, `/v1/projects/${esc(project)}/versions`, page, opts);
  }

  /** GET /v1/projects/{p}/versions/{n}. */
  get(project: string, n: number, opts?: CallOptions): Promise<T.Version> {
    return get(this.t, `/v1/projects/${esc(project)}/versions/${esc(n)}`, opts);
  }

  /**
   * POST /v1/projects/{p}/current: moves current to version if it still is
   * expectedCurrent (0 = none); else a ConflictError. Rolling back is this.
   */
  setCurrent(project: string, version: number, expectedCurrent: number, opts?: CallOptions): Promise<T.Project> {
    const body: T.SetCurrentRequest = { version, expected_current: expectedCurrent };
    return this.t.json({ method: "POST", path: `/v1/projects/${esc(project)}/current`, json: body, retry: "safe" }, opts);
  }

  /** POST /v1/projects/{p}/versions/{n}/pin. */
  pin(project: string, n: number, opts?: CallOptions): Promise<T.Version> {
    return this.t.json({ method: "POST", path: `/v1/projects/${esc(project)}/versions/${esc(n)}/pin`, retry: "safe" }, opts);
  }

  /** DELETE /v1/projects/{p}/versions/{n}/pin. */
  unpin(project: string, n: number, opts?: CallOptions): Promise<T.Version> {
    return this.t.json({ method: "DELETE", path: `/v1/projects/${esc(project)}/versions/${esc(n)}/pin`, retry: "safe" }, opts);
  }

  /**
   * GET /v1/projects/{p}/versions/{n}/changes: what changed from version
   * `against` (default: n's parent) to n, packages first, then files.
   */
  changes(project: string, n: number, q: { against?: number; limit?: number } = {}, opts?: CallOptions): Promise<T.Changes> {
    return get(this.t, `/v1/projects/${esc(project)}/versions/${esc(n)}/changes`, opts, numbers(q));
  }

  /** GET /v1/instances/{i}/changes: what a save of the instance would capture now, and what it leaves out. */
  pending(id: string, q: { limit?: number } = {}, opts?: CallOptions): Promise<T.Changes> {
    return get(this.t, `/v1/instances/${esc(id)}/changes`, opts, numbers(q));
  }

  /**
   * GET /v1/projects/{p}/versions/{n}/export: the version as a tar of an OCI
   * image layout (oci-layout, index.json, blobs/), streamed; images.import
   * on another node takes it back. An error after the first byte cuts the
   * stream, so reading it then fails.
   */
  export(project: string, n: number, opts?: CallOptions): Promise<ReadableStream<Uint8Array>> {
    return this.t.send(
      { method: "GET", path: `/v1/projects/${esc(project)}/versions/${esc(n)}/export`, headers: { Accept: "application/x-tar, application/json" }, retry: "safe", stream: true },
      opts ?? {},
      async (res) => res.body ?? new ReadableStream<Uint8Array>({ start: (c) => c.close() }),
    );
  }
}

/** Query values of the positive numbers in q. */
function numbers(q: Record<string, number | undefined>): Record<string, string | undefined> {
  const out: Record<string, string | undefined> = {};
  for (const [k, v] of Object.entries(q)) if (v !== undefined && v > 0) out[k] = String(v);
  return out;
}

export class Builds {
  constructor(private t: Transport) {}
  /** POST /v1/projects/{p}/builds: a build operation (result: BuildResult). */
  create(project: string, req: T.BuildRequest, opts: CreateOptions = {}): Promise<T.Operation<T.BuildResult>> {
    return creating(this.t, `/v1/projects/${esc(project)}/builds`, req, opts);
  }
}

export class Migrations {
  constructor(private t: Transport) {}
  /** POST /v1/projects/{p}/migrations: a migrate operation (result: MigrateResult). */
  create(project: string, req: T.MigrateRequest, opts: CreateOptions = {}): Promise<T.Operation<T.MigrateResult>> {
    return creating(this.t, `/v1/projects/${esc(project)}/migrations`, req, opts);
  }
}

export class Volumes {
  constructor(private t: Transport) {}

  /** GET /v1/projects/{p}/volumes. */
  list(project: string, opts?: CallOptions): Promise<T.Volume[]> {
    return get(this.t, `/v1/projects/${esc(project)}/volumes`, opts);
  }
  /** POST /v1/projects/{p}/volumes. Not retried after a network error (a repeat would be already_exists). */
  add(project: string, req: T.AddVolumeRequest, opts?: CallOptions): Promise<T.Project> {
    return this.t.json({ method: "POST", path: `/v1/projects/${esc(project)}/volumes`, json: req, retry: "refused" }, opts);
  }
  /** DELETE /v1/projects/{p}/volumes/{v}: the volume's data on this node is deleted. */
  remove(project: string, volume: string, opts?: CallOptions): Promise<T.Project> {
    return this.t.json({ method: "DELETE", path: `/v1/projects/${esc(project)}/volumes/${esc(volume)}`, retry: "safe" }, opts);
  }
  /** POST .../volumes/{v}/archive. */
  archive(project: string, volume: string, req: T.VolumeArchiveRequest = {}, opts?: CallOptions): Promise<T.VolumeArchive> {
    return this.t.json(
      { method: "POST", path: `/v1/projects/${esc(project)}/volumes/${esc(volume)}/archive`, json: req, retry: "refused" },
      opts,
    );
  }
  /** POST .../volumes/{v}/restore ({name} or {key}). */
  restore(project: string, volume: string, req: T.VolumeArchiveRequest, opts?: CallOptions): Promise<T.Volume> {
    return this.t.json(
      { method: "POST", path: `/v1/projects/${esc(project)}/volumes/${esc(volume)}/restore`, json: req, retry: "refused" },
      opts,
    );
  }
  /** GET /v1/projects/{p}/archives, or of one volume. */
  archives(project: string, volume?: string, opts?: CallOptions): Promise<T.VolumeArchive[]> {
    const v = volume ? `/volumes/${esc(volume)}` : "";
    return get(this.t, `/v1/projects/${esc(project)}${v}/archives`, opts);
  }
  /** DELETE /v1/projects/{p}/volumes/{v}/archives/{name}. */
  deleteArchive(project: string, volume: string, name: string, opts?: CallOptions): Promise<T.VolumeArchive> {
    return this.t.json(
      { method: "DELETE", path: `/v1/projects/${esc(project)}/volumes/${esc(volume)}/archives/${esc(name)}`, retry: "safe" },
      opts,
    );
  }
}

export class Tokens {
  constructor(private t: Transport) {}

  /** POST /v1/admin/tenants/{t}/tokens (admin): the token is shown only here. Never retried. */
  create(tenant: string, req: T.CreateTokenRequest = {}, opts?: CallOptions): Promise<T.Token> {
    return this.t.json({ method: "POST", path: `/v1/admin/tenants/${esc(tenant)}/tokens`, json: req, retry: "refused" }, opts);
  }
  /** GET /v1/admin/tokens[?tenant=T] (admin). */
  list(tenant?: string, opts?: CallOptions): Promise<T.TokenInfo[]> {
    return get(this.t, "/v1/admin/tokens", opts, { tenant });
  }
  /** GET /v1/tokens: the caller's tenant's. */
  listOwn(opts?: CallOptions): Promise<T.TokenInfo[]> {
    return get(this.t, "/v1/tokens", opts);
  }
  /** DELETE /v1/admin/tokens/{id} (admin). */
  revoke(id: number, opts?: CallOptions): Promise<T.TokenInfo> {
    return this.t.json({ method: "DELETE", path: `/v1/admin/tokens/${esc(id)}`, retry: "safe" }, opts);
  }
  /** DELETE /v1/tokens/{id}: a token of the caller's tenant. */
  revokeOwn(id: number, opts?: CallOptions): Promise<T.TokenInfo> {
    return this.t.json({ method: "DELETE", path: `/v1/tokens/${esc(id)}`, retry: "safe" }, opts);
  }
}

/** Brokered secrets of the caller's tenant (admin token); values are write-only. */
export class Secrets {
  constructor(private t: Transport) {}

  /** PUT /v1/secrets/{s}: store or rotate. */
  set(name: string, value: string, opts?: CallOptions): Promise<T.Secret> {
    return this.t.json({ method: "PUT", path: `/v1/secrets/${esc(name)}`, json: { value }, retry: "safe" }, opts);
  }
  /** PUT /v1/secrets/{s}/binding: add the secret as a header to requests to host over b.scheme, "http" (default) or "https" ("" host unbinds). */
  bind(name: string, b: T.SecretBinding, opts?: CallOptions): Promise<T.Secret> {
    return this.t.json({ method: "PUT", path: `/v1/secrets/${esc(name)}/binding`, json: b, retry: "safe" }, opts);
  }
  /** GET /v1/secrets: names and bindings, never values. */
  list(opts?: CallOptions): Promise<T.Secret[]> {
    return get(this.t, "/v1/secrets", opts);
  }
  /** DELETE /v1/secrets/{s}: revoke. */
  delete(name: string, opts?: CallOptions): Promise<T.Secret> {
    return this.t.json({ method: "DELETE", path: `/v1/secrets/${esc(name)}`, retry: "safe" }, opts);
  }
}

export class Tenants {
  constructor(private t: Transport) {}

  /** PUT /v1/admin/tenants/{t}/quota (admin). */
  setQuota(tenant: string, q: T.Quota, opts?: CallOptions): Promise<T.Quota> {
    return this.t.json({ method: "PUT", path: `/v1/admin/tenants/${esc(tenant)}/quota`, json: q, retry: "safe" }, opts);
  }
  /** GET /v1/admin/tenants/{t}/usage (admin). */
  usage(tenant: string, opts?: CallOptions): Promise<T.Usage> {
    return get(this.t, `/v1/admin/tenants/${esc(tenant)}/usage`, opts);
  }
  /** GET /v1/admin/tenants/{t}/tokens (admin). */
  tokens(tenant: string, opts?: CallOptions): Promise<T.TokenInfo[]> {
    return get(this.t, `/v1/admin/tenants/${esc(tenant)}/tokens`, opts);
  }
}

export class Operations {
  constructor(private t: Transport) {}

  /** GET /v1/operations/{id}. */
  get<R = unknown>(id: string, opts?: CallOptions): Promise<T.Operation<R>> {
    return get(this.t, `/v1/operations/${esc(id)}`, opts);
  }

  /** DELETE /v1/operations/{id}: asks for cancellation; answers the operation as it is now. */
  cancel<R = unknown>(id: string, opts?: CallOptions): Promise<T.Operation<R>> {
    return this.t.json({ method: "DELETE", path: `/v1/operations/${esc(id)}`, retry: "safe" }, opts);
  }

  /** GET /v1/operations/{id}/events as JSON: the events after `after`, at once. */
  listEvents(id: string, after = 0, opts?: CallOptions): Promise<T.OperationEvent[]> {
    return get(this.t, `/v1/operations/${esc(id)}/events`, opts, { after: String(after), wait: "false" });
  }

  /**
   * The operation's events as they happen (GET .../events, server-sent
   * events), each exactly once and in order; the generator returns the
   * finished operation. A dropped connection is resumed from the last event
   * seen (Last-Event-ID); after `maxReconnects` reconnects in a row without
   * a new event it falls back to polling. Breaking out of the loop closes
   * the stream.
   *
   *     for await (const ev of client.operations.events(op.id)) console.log(ev.seq, ev.type);
   */
  async *events<R = unknown>(id: string, opts: EventStreamOptions = {}): AsyncGenerator<T.OperationEvent, T.Operation<R>, undefined> {
    let last = opts.after ?? 0;
    const maxReconnects = opts.maxReconnects ?? 5;
    for (let failures = 0; failures <= maxReconnects; ) {
      const before = last;
      let reason: unknown;
      const stream = this.stream<R>(id, last, opts);
      try {
        for (;;) {
          const r = await stream.next();
          if (r.done) return r.value;
          if (r.value.seq <= last) continue; // never twice
          last = r.value.seq;
          yield r.value;
        }
      } catch (e) {
        if (permanentOrAbort(e, opts.signal)) throw opts.signal?.aborted ? abortError(opts.signal) : e;
        reason = e;
      } finally {
        // Closes the connection when the caller stops iterating early.
        await stream.return(undefined as never).catch(() => {});
      }
      failures = last > before ? 0 : failures + 1;
      if (failures > maxReconnects) break;
      opts.onReconnect?.(last, reason);
      await sleep(Math.min(failures * this.t.o.pollIntervalMs, 5000), opts.signal);
    }
    // The stream keeps failing: poll. The operation is read before its
    // events, so when it is done the events read next are all it will have.
    for (let failures = 0; ; ) {
      try {
        const op = await this.get<R>(id, { signal: opts.signal });
        for (const ev of await this.listEvents(id, last, { signal: opts.signal })) {
          if (ev.seq <= last) continue;
          last = ev.seq;
          yield ev;
        }
        if (isDone(op)) return op;
        failures = 0;
      } catch (e) {
        if (permanentOrAbort(e, opts.signal) || ++failures >= 10) throw opts.signal?.aborted ? abortError(opts.signal) : e;
      }
      await sleep(this.t.o.pollIntervalMs, opts.signal);
    }
  }

  /** One event stream after seq `after`; returns the operation at the end event, throws otherwise. */
  private async *stream<R>(id: string, after: number, opts: EventStreamOptions): AsyncGenerator<T.OperationEvent, T.Operation<R>, undefined> {
    const idle = opts.idleTimeoutMs ?? 45_000;
    const conn = new AbortController();
    const link = linkSignals([opts.signal, conn.signal]);
    let timer: ReturnType<typeof setTimeout> | undefined;
    const arm = () => {
      clearTimeout(timer);
      timer = setTimeout(() => conn.abort(new Error(`no data on the event stream for ${idle} ms`)), idle);
    };
    try {
      const headers: Record<string, string> = { Accept: "text/event-stream" };
      if (after > 0) headers["Last-Event-ID"] = String(after);
      arm();
      const res = await this.t.send(
        { method: "GET", path: `/v1/operations/${esc(id)}/events`, headers, retry: "refused", stream: true },
        { signal: link.signal },
        async (r) => r,
      );
      const ct = res.headers.get("Content-Type") ?? "";
      if (!ct.startsWith("text/event-stream") || !res.body) {
        await res.body?.cancel().catch(() => {});
        throw new Error(`envd: operation ${id} events: content type ${JSON.stringify(ct)} is not an event stream`);
      }
      // Every chunk, keep-alive comments included, re-arms the idle timer.
      const body = res.body.pipeThrough(
        new TransformStream<Uint8Array, Uint8Array>({
          transform(chunk, ctl) {
            arm();
            ctl.enqueue(chunk);
          },
        }),
      );
      for await (const m of parseSSE(body)) {
        if (m.event === "end") return JSON.parse(m.data) as T.Operation<R>;
        if (m.event === "error") {
          let d: T.ErrorBody | undefined;
          try {
            d = JSON.parse(m.data) as T.ErrorBody;
          } catch {
            // not an error body
          }
          if (d?.error?.code) throw errorFromDetail(statusOfCode(d.error.code), d.error);
          throw new Error(`envd: operation ${id} events: stream error ${m.data}`);
        }
        const ev = JSON.parse(m.data) as T.OperationEvent;
        if (!ev.seq && m.id) ev.seq = Number(m.id);
        yield ev;
      }
      throw new Error(`envd: operation ${id} events: the stream ended before the operation was done`);
    } catch (e) {
      if (conn.signal.aborted && !opts.signal?.aborted) throw conn.signal.reason;
      throw e;
    } finally {
      clearTimeout(timer);
      conn.abort();
      link.done();
    }
  }

  /**
   * Follows the operation until it is done and returns it in its final
   * state, which may be failed or canceled (check state and error).
   * onEvent gets each event once, in order.
   */
  async wait<R = unknown>(id: string, opts: WaitOptions = {}): Promise<T.Operation<R>> {
    const it = this.events<R>(id, opts);
    for (;;) {
      const r = await it.next();
      if (r.done) return r.value;
      opts.onEvent?.(r.value);
    }
  }

  /** Waits for the operation and returns its result; throws its error (an EnvdError) unless it succeeded. */
  async result<R = unknown>(id: string, opts: WaitOptions = {}): Promise<R> {
    const op = await this.wait<R>(id, opts);
    if (op.state !== "succeeded") throw operationError(op);
    return op.result as R;
  }
}

/** A page to ask for: at most limit items (1 to 1000; 100 when only pageToken is given) after pageToken. */
export interface PageRequest {
  limit?: number;
  pageToken?: string;
}

/** One page of a list and the token of the next ("" after the last). */
export interface Page<T> {
  items: T[];
  nextPageToken: string;
}

/** nextPageToken reads the page_token of a Link header's rel="next" URL (RFC 8288). */
export function nextPageToken(link: string | null): string {
  const m = /<([^>]+)>\s*;\s*rel="next"/.exec(link ?? "");
  if (!m) return "";
  return new URL(m[1], "http://envd.invalid").searchParams.get("page_token") ?? "";
}

function getPage<I>(t: Transport, path: string, page: PageRequest, opts?: CallOptions): Promise<Page<I>> {
  const query: Record<string, string | number | undefined> = { limit: page.limit, page_token: page.pageToken };
  if (page.limit === undefined && !page.pageToken) query.limit = 100; // a page, never the whole list
  return t.send({ method: "GET", path, query, retry: "safe" }, opts ?? {}, async (res) => ({
    items: ((await res.json()) as I[]) ?? [],
    nextPageToken: nextPageToken(res.headers.get("Link")),
  }));
}

/** The cluster's nodes (admin token). */
export class Nodes {
  constructor(private t: Transport) {}

  /** GET /v1/nodes. */
  async list(opts?: CallOptions): Promise<T.Node[]> {
    const r = await get<T.NodeList>(this.t, "/v1/nodes", opts);
    return r.nodes;
  }

  /** GET /v1/nodes/{name}. */
  get(name: string, opts?: CallOptions): Promise<T.Node> {
    return get<T.Node>(this.t, `/v1/nodes/${esc(name)}`, opts);
  }

  /** POST /v1/nodes/{name}/cordon: no new placements there. */
  cordon(name: string, opts?: CallOptions): Promise<T.Node> {
    return this.t.json({ method: "POST", path: `/v1/nodes/${esc(name)}/cordon`, retry: "safe" }, opts);
  }

  /** POST /v1/nodes/{name}/uncordon: ready again. */
  uncordon(name: string, opts?: CallOptions): Promise<T.Node> {
    return this.t.json({ method: "POST", path: `/v1/nodes/${esc(name)}/uncordon`, retry: "safe" }, opts);
  }

  /** POST /v1/nodes/{name}/drain: the node hibernates its instances, then shows state drained. */
  drain(name: string, opts?: CallOptions): Promise<T.Node> {
    return this.t.json({ method: "POST", path: `/v1/nodes/${esc(name)}/drain`, retry: "safe" }, opts);
  }

  /** GET /v1/cluster/join-command: the envd serve line that joins this cluster (holds secrets). */
  joinCommand(opts?: CallOptions): Promise<T.JoinCommand> {
    return get<T.JoinCommand>(this.t, "/v1/cluster/join-command", opts);
  }

  /** PUT /v1/projects/{p}/checkpoint: how often the project's running retained instances are checkpointed ("0" = never). */
  setCheckpointEvery(project: string, setting: T.CheckpointSetting, opts?: CallOptions): Promise<T.CheckpointSetting> {
    return this.t.json({ method: "PUT", path: `/v1/projects/${esc(project)}/checkpoint`, json: setting, retry: "safe" }, opts);
  }

  /** GET /v1/projects/{p}/checkpoint. */
  checkpointEvery(project: string, opts?: CallOptions): Promise<T.CheckpointSetting> {
    return get<T.CheckpointSetting>(this.t, `/v1/projects/${esc(project)}/checkpoint`, opts);
  }

  /** POST /v1/cluster/join-tokens: a join token (used once) and the short `envd serve --join URL --token T` line. */
  createJoinToken(req: T.JoinTokenRequest = {}, opts?: CallOptions): Promise<T.JoinToken> {
    return this.t.json({ method: "POST", path: "/v1/cluster/join-tokens", json: req, retry: "refused" }, opts);
  }

  /** POST /v1/cluster/join: the cluster's settings for a joining node; the client's token must be the join token. */
  join(req: T.JoinRequest, opts?: CallOptions): Promise<T.JoinConfig> {
    return this.t.json({ method: "POST", path: "/v1/cluster/join", json: req, retry: "refused" }, opts);
  }
}
