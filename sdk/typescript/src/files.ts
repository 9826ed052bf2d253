// The file API of an instance (docs/api.md, "Files"): list, ranged read,
// atomic write, mkdir, move, copy, remove, tar archives out and in, and a
// watch stream of changes.
import { makeError } from "./errors.js";
import { esc, linkSignals, type CallOptions, type Transport } from "./http.js";
import { parseSSE } from "./sse.js";
import { errorFromDetail, statusOfCode } from "./errors.js";
import type * as T from "./types.js";

/** Whose rights a file call uses: a user of the instance's /etc/passwd, or ids. Default: the image's user. */
export interface FileUserOptions {
  user?: string;
  uid?: number;
  gid?: number;
}

export type FileCallOptions = CallOptions & FileUserOptions;

/** Bodies accepted by files.write and files.upload. */
export type BytesSource = string | Uint8Array | ArrayBuffer | Blob | ReadableStream<Uint8Array>;

/** A file's content as files.read answers it. */
export interface FileContent {
  data: Uint8Array;
  /** The Content-Type the server gave: from the file's name, else sniffed from its first bytes. */
  contentType: string;
  /** The whole file's size in bytes (not only the part read). */
  size: number;
  /** The offset of data in the file. */
  offset: number;
  /** Last-Modified, as the server sent it. */
  modified?: string;
  /** The instance is stopped and was read from its retained layer. */
  readOnly: boolean;
}

/** The header that tells a GET .../files answer's kind ("dir" or "file"). */
export const FILE_TYPE_HEADER = "X-Envd-File-Type";

function userQuery(o: FileUserOptions = {}): Record<string, string | undefined> {
  return {
    user: o.user || undefined,
    uid: o.uid === undefined ? undefined : String(o.uid),
    gid: o.gid === undefined ? undefined : String(o.gid),
  };
}

function bodyOf(data: BytesSource): BodyInit {
  if (typeof data === "string") return new TextEncoder().encode(data) as unknown as BodyInit;
  if (data instanceof ArrayBuffer) return new Uint8Array(data) as unknown as BodyInit;
  return data as unknown as BodyInit;
}

/** Reads the first bytes of a body to tell its compression: gzip, zstd, else a plain tar. */
async function archiveType(data: BytesSource): Promise<string> {
  let head: Uint8Array | undefined;
  if (data instanceof Uint8Array) head = data.subarray(0, 4);
  else if (data instanceof ArrayBuffer) head = new Uint8Array(data, 0, Math.min(4, data.byteLength));
  else if (typeof Blob !== "undefined" && data instanceof Blob) head = new Uint8Array(await data.slice(0, 4).arrayBuffer());
  if (!head) return "application/octet-stream"; // a stream: the server sniffs it
  if (head[0] === 0x1f && head[1] === 0x8b) return "application/gzip";
  if (head[0] === 0x28 && head[1] === 0xb5 && head[2] === 0x2f && head[3] === 0xfd) return "application/zstd";
  return "application/x-tar";
}

export class Files {
  constructor(private t: Transport) {}

  private path(id: string, sub = ""): string {
    return `/v1/instances/${esc(id)}/files${sub}`;
  }

  /**
   * GET /v1/instances/{i}/files?path=DIR: a directory's whole listing,
   * every page of it (the server answers at most 1000 entries a page).
   * A file is an InvalidArgumentError here.
   */
  async list(id: string, path: string, opts: FileCallOptions = {}): Promise<T.FileList> {
    let all: T.FileList | undefined;
    let token: string | undefined;
    for (;;) {
      const page = await this.listPage(id, path, { ...opts, pageToken: token });
      if (!all) all = page;
      else all.entries.push(...page.entries);
      if (!page.next_page_token) {
        delete all.next_page_token;
        return all;
      }
      token = page.next_page_token;
    }
  }

  /**
   * One page of a directory's listing, by name: at most limit entries
   * (1 to 1000, default 1000) after pageToken (the next_page_token of the
   * page before). next_page_token is absent on the last page.
   */
  async listPage(id: string, path: string, opts: FileCallOptions & { limit?: number; pageToken?: string } = {}): Promise<T.FileList> {
    const query: Record<string, string> = { path, ...userQuery(opts) };
    if (opts.limit !== undefined) query.limit = String(opts.limit);
    if (opts.pageToken) query.page_token = opts.pageToken;
    return this.t.send({ method: "GET", path: this.path(id), query, retry: "safe" }, opts, async (res) => {
      if (res.headers.get(FILE_TYPE_HEADER) !== "dir") {
        await res.body?.cancel().catch(() => {});
        throw makeError(400, "invalid_argument", `${path} in instance ${id} is not a directory`);
      }
      return (await res.json()) as T.FileList;
    });
  }

  /**
   * GET /v1/instances/{i}/files?path=FILE: the file's bytes (from offset,
   * at most length of them; a Range request), with the type the server
   * tells from the name or the first bytes. A directory is an
   * InvalidArgumentError; a range past the end a 416 (invalid_argument).
   */
  async read(id: string, path: string, opts: FileCallOptions & { offset?: number; length?: number } = {}): Promise<FileContent> {
    const headers: Record<string, string> = { Accept: "*/*" };
    const off = opts.offset ?? 0;
    if (opts.length !== undefined && opts.length <= 0) throw new RangeError("envd: files.read: length must be positive");
    if (off > 0 || opts.length !== undefined) headers["Range"] = `bytes=${off}-${opts.length !== undefined ? off + opts.length - 1 : ""}`;
    return this.t.send(
      { method: "GET", path: this.path(id), query: { path, ...userQuery(opts) }, headers, retry: "safe" },
      opts,
      async (res) => {
        if (res.headers.get(FILE_TYPE_HEADER) === "dir") {
          await res.body?.cancel().catch(() => {});
          throw makeError(400, "invalid_argument", `${path} in instance ${id} is a directory: use files.list`);
        }
        const data = new Uint8Array(await res.arrayBuffer());
        let size = data.length;
        let offset = 0;
        const cr = /^bytes (\d+)-\d+\/(\d+)$/.exec(res.headers.get("Content-Range") ?? "");
        if (res.status === 206 && cr) {
          offset = Number(cr[1]);
          size = Number(cr[2]);
        }
        const c: FileContent = {
          data,
          contentType: res.headers.get("Content-Type") ?? "application/octet-stream",
          size,
          offset,
          readOnly: res.headers.get("X-Envd-Read-Only") === "true",
        };
        const lm = res.headers.get("Last-Modified");
        if (lm) c.modified = lm;
        return c;
      },
    );
  }

  /** The whole file as UTF-8 text (invalid bytes become U+FFFD). */
  async readText(id: string, path: string, opts: FileCallOptions = {}): Promise<string> {
    return new TextDecoder().decode((await this.read(id, path, opts)).data);
  }

  /**
   * PUT /v1/instances/{i}/files?path=FILE: writes the file atomically (a
   * temporary file renamed into place). mode is octal ("0755"; default:
   * kept, 0644 for a new file); mkdir makes missing parents. A stream body
   * is sent as it is read and never retried.
   */
  write(id: string, path: string, data: BytesSource, opts: FileCallOptions & { mode?: string; mkdir?: boolean } = {}): Promise<T.FileInfo> {
    return this.t.json(
      {
        method: "PUT",
        path: this.path(id),
        query: { path, mode: opts.mode, mkdir: opts.mkdir ? "1" : undefined, ...userQuery(opts) },
        body: bodyOf(data),
        contentType: "application/octet-stream",
        retry: "safe",
      },
      opts,
    );
  }

  /** POST .../files/mkdir (mode default 0755; parents as mkdir -p). */
  mkdir(id: string, path: string, opts: FileCallOptions & { mode?: string; parents?: boolean } = {}): Promise<T.FileInfo> {
    const req: T.FileMkdirRequest = { path };
    if (opts.mode) req.mode = opts.mode;
    if (opts.parents) req.parents = true;
    return this.t.json({ method: "POST", path: this.path(id, "/mkdir"), query: userQuery(opts), json: req, retry: "refused" }, opts);
  }

  /** POST .../files/move: renames from to to (overwrite replaces an existing to). */
  move(id: string, from: string, to: string, opts: FileCallOptions & { overwrite?: boolean } = {}): Promise<T.FileInfo> {
    const req: T.FileMoveRequest = { from, to };
    if (opts.overwrite) req.overwrite = true;
    return this.t.json({ method: "POST", path: this.path(id, "/move"), query: userQuery(opts), json: req, retry: "refused" }, opts);
  }

  /** POST .../files/copy: copies a file, symlink or directory tree. */
  copy(id: string, from: string, to: string, opts: FileCallOptions & { overwrite?: boolean } = {}): Promise<T.FileInfo> {
    const req: T.FileMoveRequest = { from, to };
    if (opts.overwrite) req.overwrite = true;
    return this.t.json({ method: "POST", path: this.path(id, "/copy"), query: userQuery(opts), json: req, retry: "refused" }, opts);
  }

  /** DELETE .../files?path=P (recursive for a non-empty directory). */
  async remove(id: string, path: string, opts: FileCallOptions & { recursive?: boolean } = {}): Promise<void> {
    await this.t.json(
      { method: "DELETE", path: this.path(id), query: { path, recursive: opts.recursive ? "1" : undefined, ...userQuery(opts) }, retry: "safe" },
      opts,
    );
  }

  /**
   * GET .../files/archive: a tar (format "tar", the default) or tar.zst of
   * a directory or file, streamed. An error after the first byte cuts the
   * stream (reading it then fails), so a short archive is never taken as whole.
   */
  download(id: string, path: string, opts: FileCallOptions & { format?: "tar" | "tar.zst" } = {}): Promise<ReadableStream<Uint8Array>> {
    return this.t.send(
      {
        method: "GET",
        path: this.path(id, "/archive"),
        query: { path, format: opts.format, ...userQuery(opts) },
        headers: { Accept: "application/x-tar, application/zstd, application/json" },
        retry: "safe",
        stream: true,
      },
      opts,
      async (res) => res.body ?? new ReadableStream<Uint8Array>({ start: (c) => c.close() }),
    );
  }

  /**
   * POST .../files/archive: extracts a tar (plain, gzip or zstd, told from
   * its first bytes) into the directory path (mkdir makes it). Not
   * retried after a network error.
   */
  async upload(id: string, path: string, tar: BytesSource, opts: FileCallOptions & { mkdir?: boolean } = {}): Promise<T.FileArchiveResult> {
    return this.t.json(
      {
        method: "POST",
        path: this.path(id, "/archive"),
        query: { path, mkdir: opts.mkdir ? "1" : undefined, ...userQuery(opts) },
        body: bodyOf(tar),
        contentType: await archiveType(tar),
        retry: "refused",
      },
      opts,
    );
  }

  /**
   * GET .../files/watch: the changes under path (recursive: in its
   * subdirectories too), as they happen, in the kernel's order. The
   * iteration ends when the server ends the stream (the instance stopped,
   * the directory went away); breaking out of the loop or the signal
   * closes it. No resume: changes while disconnected are not replayed.
   *
   *     for await (const ev of client.files.watch(id, "/work")) console.log(ev.type, ev.path);
   */
  async *watch(id: string, path: string, opts: FileCallOptions & { recursive?: boolean } = {}): AsyncGenerator<T.FileEvent, void, undefined> {
    const conn = new AbortController();
    const link = linkSignals([opts.signal, conn.signal]);
    try {
      const res = await this.t.send(
        {
          method: "GET",
          path: this.path(id, "/watch"),
          query: { path, recursive: opts.recursive ? "1" : undefined, ...userQuery(opts) },
          headers: { Accept: "text/event-stream" },
          retry: "refused",
          stream: true,
        },
        { signal: link.signal },
        async (r) => r,
      );
      const ct = res.headers.get("Content-Type") ?? "";
      if (!ct.startsWith("text/event-stream") || !res.body) {
        await res.body?.cancel().catch(() => {});
        throw new Error(`envd: watch ${path} in ${id}: content type ${JSON.stringify(ct)} is not an event stream`);
      }
      for await (const m of parseSSE(res.body)) {
        if (m.event === "end") return;
        if (m.event === "error") {
          let d: T.ErrorBody | undefined;
          try {
            d = JSON.parse(m.data) as T.ErrorBody;
          } catch {
            // not an error body
          }
          if (d?.error?.code) throw errorFromDetail(statusOfCode(d.error.code), d.error);
          throw new Error(`envd: watch ${path} in ${id}: stream error ${m.data}`);
        }
        yield JSON.parse(m.data) as T.FileEvent;
      }
    } finally {
      conn.abort();
      link.done();
    }
  }
}
