import { EnvdError, errorFromResponse, parseRetryAfter } from "./errors.js";

/** A WebSocket constructor: the browser's, Node's global one, or a compatible one. */
export type WebSocketConstructor = new (url: string | URL, protocols?: string | string[]) => WebSocket;

/** Options of a Client. */
export interface ClientOptions {
  /** The server's base URL, for example "http://127.0.0.1:43123" (DATA_DIR/envd.url). */
  url: string;
  /** A bearer token (DATA_DIR/admin.token, or a tenant's). */
  token?: string;
  /** Default: globalThis.fetch. */
  fetch?: typeof fetch;
  /** Default: globalThis.WebSocket (Node 20 needs --experimental-websocket; Node 22+ has it). */
  WebSocket?: WebSocketConstructor;
  /**
   * Default time limit of one request (not of event streams, exec
   * WebSockets or waits), in ms. Default: none; bound calls with `signal`.
   */
  timeoutMs?: number;
  /** How many times a retryable request is tried again. Default: 3. */
  retries?: number;
  /** Base of the exponential back-off between retries, in ms. Default: 250. */
  retryDelayMs?: number;
  /** The longest wait for one retry, a server's Retry-After included, in ms. Default: 30000. */
  maxRetryDelayMs?: number;
  /** How often waiting polls when the event stream keeps failing, in ms. Default: 500. */
  pollIntervalMs?: number;
}

/** Options of one call. */
export interface CallOptions {
  /** Aborts the call; the error is then the signal's reason (an AbortError by default). */
  signal?: AbortSignal;
  /** This call's time limit in ms; overrides ClientOptions.timeoutMs. */
  timeoutMs?: number;
}

/** Options of a call that creates something. */
export interface CreateOptions extends CallOptions {
  /**
   * The Idempotency-Key. Default: a random key made for this call, sent on
   * each of its retries, so a retry never creates twice. Pass your own to
   * make retries across processes safe too.
   */
  idempotencyKey?: string;
}

/**
 * When a failed request may be sent again:
 * - "safe": the request is idempotent (GET, PUT, DELETE, or a POST with an
 *   Idempotency-Key): retried after network errors, 502, 503 and 429;
 * - "refused": only when the server refused it before doing anything (429).
 */
export type RetryPolicy = "safe" | "refused";

export interface Request {
  method: string;
  /** Path with escaped segments, starting with "/". */
  path: string;
  query?: Record<string, string | number | boolean | string[] | undefined>;
  headers?: Record<string, string>;
  /** A JSON body (serialized here) ... */
  json?: unknown;
  /** ... or a raw body. A ReadableStream body is never retried. */
  body?: BodyInit;
  contentType?: string;
  retry: RetryPolicy;
  /** Streams (SSE) have no time limit. */
  stream?: boolean;
}

export interface Resolved {
  fetch: typeof fetch;
  WebSocket: WebSocketConstructor | undefined;
  timeoutMs: number | undefined;
  retries: number;
  retryDelayMs: number;
  maxRetryDelayMs: number;
  pollIntervalMs: number;
}

/** Makes an abort error the way fetch does. */
export function abortError(signal?: AbortSignal): unknown {
  if (signal?.reason !== undefined) return signal.reason;
  return new DOMException("This operation was aborted", "AbortError");
}

/** Sleeps ms, or rejects with the signal's reason when it aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(abortError(signal));
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(abortError(signal));
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/**
 * A signal that aborts when any of the given ones does, or after timeoutMs.
 * Call done() when the request is over, to drop the timer and listeners.
 */
export function linkSignals(signals: (AbortSignal | undefined)[], timeoutMs?: number): { signal: AbortSignal; done: () => void } {
  const ctl = new AbortController();
  const cleanups: (() => void)[] = [];
  for (const s of signals) {
    if (!s) continue;
    if (s.aborted) {
      ctl.abort(s.reason);
      break;
    }
    const f = () => ctl.abort(s.reason);
    s.addEventListener("abort", f, { once: true });
    cleanups.push(() => s.removeEventListener("abort", f));
  }
  if (timeoutMs !== undefined && timeoutMs > 0 && !ctl.signal.aborted) {
    const t = setTimeout(
      () => ctl.abort(new DOMException(`the request took longer than ${timeoutMs} ms`, "TimeoutError")),
      timeoutMs,
    );
    cleanups.push(() => clearTimeout(t));
  }
  return { signal: ctl.signal, done: () => cleanups.forEach((f) => f()) };
}

/** A random Idempotency-Key. */
export function newIdempotencyKey(): string {
  const c = (globalThis as { crypto?: Crypto }).crypto;
  if (c?.randomUUID) return "sdk-" + c.randomUUID();
  const b = new Uint8Array(16);
  if (c?.getRandomValues) c.getRandomValues(b);
  else for (let i = 0; i < b.length; i++) b[i] = Math.floor(Math.random() * 256);
  return "sdk-" + Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

/** Encodes one path segment. */
export const esc = (s: string | number): string => encodeURIComponent(String(s));

/** The HTTP transport: authentication, errors, time limits and retries. */
export class Transport {
  readonly base: string;
  readonly token: string | undefined;
  readonly o: Resolved;

  constructor(opts: ClientOptions) {
    if (!opts || !opts.url) throw new TypeError("envd: ClientOptions.url is required");
    this.base = opts.url.replace(/\/+$/, "");
    this.token = opts.token;
    const f = opts.fetch ?? globalThis.fetch;
    if (!f) throw new TypeError("envd: no fetch: pass ClientOptions.fetch");
    this.o = {
      fetch: f.bind(globalThis) as typeof fetch,
      WebSocket: opts.WebSocket ?? (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket,
      timeoutMs: opts.timeoutMs,
      retries: opts.retries ?? 3,
      retryDelayMs: opts.retryDelayMs ?? 250,
      maxRetryDelayMs: opts.maxRetryDelayMs ?? 30_000,
      pollIntervalMs: opts.pollIntervalMs ?? 500,
    };
  }

  url(path: string, query?: Request["query"]): string {
    let u = this.base + path;
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(query ?? {})) {
      if (v === undefined) continue;
      if (Array.isArray(v)) v.forEach((x) => q.append(k, x));
      else q.append(k, String(v));
    }
    const s = q.toString();
    if (s) u += "?" + s;
    return u;
  }

  /**
   * Sends r and returns read(response) for a 2xx answer; any other status is
   * thrown as an EnvdError. The time limit covers read too. For streams
   * (r.stream) read gets the response before its body is read and there is
   * no time limit.
   */
  async send<T>(r: Request, opts: CallOptions, read: (res: Response) => Promise<T>): Promise<T> {
    const headers: Record<string, string> = { Accept: "application/json", ...r.headers };
    if (this.token) headers["Authorization"] = "Bearer " + this.token;
    let body: BodyInit | undefined = r.body;
    if (r.json !== undefined) {
      body = JSON.stringify(r.json);
      headers["Content-Type"] = "application/json";
    } else if (r.contentType) {
      headers["Content-Type"] = r.contentType;
    }
    const replayable = !(typeof ReadableStream !== "undefined" && body instanceof ReadableStream);
    const timeoutMs = r.stream ? undefined : (opts.timeoutMs ?? this.o.timeoutMs);
    const url = this.url(r.path, r.query);
    for (let attempt = 0; ; attempt++) {
      const link = r.stream ? { signal: opts.signal, done: () => {} } : linkSignals([opts.signal], timeoutMs);
      let retryAfterMs: number | undefined;
      try {
        const init: RequestInit & { duplex?: string } = { method: r.method, headers, body };
        if (link.signal) init.signal = link.signal;
        if (!replayable) init.duplex = "half";
        const res = await this.o.fetch(url, init);
        if (res.ok) return await read(res);
        const text = await res.text().catch(() => "");
        const err = errorFromResponse(res.status, res.statusText, text, parseRetryAfter(res.headers.get("Retry-After")));
        const retryable = res.status === 429 || (r.retry === "safe" && (res.status === 502 || res.status === 503));
        if (!retryable || !replayable || attempt >= this.o.retries) throw err;
        if (err.retryAfter !== undefined) retryAfterMs = err.retryAfter * 1000;
      } catch (e) {
        if (e instanceof EnvdError) throw e;
        if (opts.signal?.aborted) throw abortError(opts.signal);
        if (link.signal?.aborted) throw link.signal.reason ?? e; // the time limit
        // A network error (fetch throws a TypeError) or a body cut short.
        if (!(e instanceof TypeError) || r.retry !== "safe" || !replayable || attempt >= this.o.retries) throw e;
      } finally {
        link.done();
      }
      const backoff = Math.min(this.o.retryDelayMs * 2 ** attempt, this.o.maxRetryDelayMs);
      await sleep(Math.min(retryAfterMs ?? backoff, this.o.maxRetryDelayMs), opts.signal);
    }
  }

  /** Sends r and decodes its JSON answer (undefined for an empty body). */
  json<T>(r: Request, opts: CallOptions = {}): Promise<T> {
    return this.send(r, opts, async (res) => {
      const text = await res.text();
      if (text === "") return undefined as T;
      try {
        return JSON.parse(text) as T;
      } catch (e) {
        throw new SyntaxError(`envd: ${r.method} ${r.path}: the answer is not JSON: ${(e as Error).message}`);
      }
    });
  }
}
