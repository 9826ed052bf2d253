// The exec WebSocket (GET /v1/instances/{i}/exec/ws): every message is
// binary, its first byte the channel (Go: api/execproto; docs/api.md,
// "Streaming and interactive").

import { EnvdError, errorFromDetail, errorFromResponse, statusOfCode } from "./errors.js";
import { abortError, esc, type Transport, type WebSocketConstructor } from "./http.js";
import type { ExecExit } from "./types.js";

/** The channels of the exec stream. */
export const Channel = {
  Stdin: 0,
  Stdout: 1,
  Stderr: 2,
  Resize: 3,
  Exit: 4,
  EOF: 5,
} as const;

/** The exec stream's subprotocol; the server selects it. */
export const EXEC_SUBPROTOCOL = "v1.exec.envd.dev";
/** Starts the subprotocol that carries a bearer token; never selected. */
export const BEARER_PREFIX = "base64url.bearer.envd.dev.";
/** The most payload the server puts in one message; the client sends the same at most. */
export const CHUNK = 32 << 10;

/** The subprotocol carrying token (base64url of its UTF-8 bytes, no padding). */
export function bearerSubprotocol(token: string): string {
  const bytes = new TextEncoder().encode(token);
  let bin = "";
  for (const b of bytes) bin += String.fromCharCode(b);
  return BEARER_PREFIX + btoa(bin).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

/** Options of a streaming exec. */
export interface ExecStreamOptions {
  /** The argv (required). */
  args: string[];
  env?: string[];
  cwd?: string;
  /** Starts a stopped or hibernated instance before the upgrade (a WakingError, 503, past the server's wake wait). */
  wake?: boolean;
  /** Gives the command a terminal: all output arrives on stdout. */
  tty?: boolean;
  /** The terminal's size from the start (both or neither). Send it: a first resize races the command's first look. */
  cols?: number;
  rows?: number;
  onStdout?: (data: Uint8Array) => void;
  /** Never called with tty. */
  onStderr?: (data: Uint8Array) => void;
  /** Ends the session; the server kills the command. */
  signal?: AbortSignal;
}

/**
 * A running streaming exec. Register listeners synchronously after the
 * session is made: no output is delivered before the next turn of the event
 * loop. Writes made before the connection opens are queued.
 */
export class ExecSession {
  /** Resolves when the WebSocket is open. */
  readonly opened: Promise<void>;
  /**
   * Resolves with the exit code when the command ends (a non-zero code is
   * not an error); rejects with an EnvdError when the command could not run
   * (instance not Running, handshake refused), or when the connection ends
   * without an exit message.
   */
  readonly exit: Promise<number>;

  private ws: WebSocket;
  private queue: Uint8Array[] = [];
  private out = new Set<(d: Uint8Array) => void>();
  private err = new Set<(d: Uint8Array) => void>();
  private exitListeners = new Set<(code: number) => void>();
  private finished = false;
  private fail: (e: unknown) => void;

  /** @internal Use Client.instances.execStream. */
  constructor(t: Transport, id: string, o: ExecStreamOptions) {
    if (!o.args || o.args.length === 0 || !o.args[0]) throw new TypeError("envd: exec: no command (args is empty)");
    if ((o.cols === undefined) !== (o.rows === undefined)) throw new TypeError("envd: exec: give cols and rows together");
    const WS: WebSocketConstructor | undefined = t.o.WebSocket;
    if (!WS) {
      throw new TypeError(
        "envd: no WebSocket: pass ClientOptions.WebSocket (Node 20 has a global one with --experimental-websocket)",
      );
    }
    if (o.onStdout) this.out.add(o.onStdout);
    if (o.onStderr) this.err.add(o.onStderr);
    const query: Record<string, string | string[] | undefined> = { cmd: o.args };
    if (o.env?.length) query.env = o.env;
    if (o.cwd) query.cwd = o.cwd;
    if (o.wake) query.wake = "1";
    if (o.tty) {
      query.tty = "1";
      if (o.cols !== undefined) {
        query.cols = String(o.cols);
        query.rows = String(o.rows);
      }
    }
    const httpURL = t.url(`/v1/instances/${esc(id)}/exec/ws`, query);
    const wsURL = httpURL.replace(/^http(s?):/, "ws$1:");
    const protocols = [EXEC_SUBPROTOCOL];
    if (t.token) protocols.push(bearerSubprotocol(t.token));
    this.ws = new WS(wsURL, protocols);
    this.ws.binaryType = "arraybuffer";

    let resolveOpen!: () => void, rejectOpen!: (e: unknown) => void;
    let resolveExit!: (n: number) => void, rejectExit!: (e: unknown) => void;
    this.opened = new Promise((res, rej) => ((resolveOpen = res), (rejectOpen = rej)));
    this.exit = new Promise((res, rej) => ((resolveExit = res), (rejectExit = rej)));
    // A caller that awaits only one of them, or neither (close() and go),
    // must not get an unhandled rejection; awaiting still sees the error.
    this.opened.catch(() => {});
    this.exit.catch(() => {});

    let open = false;
    const fail = (e: unknown) => {
      if (this.finished) return;
      this.finished = true;
      rejectOpen(e);
      rejectExit(e);
      try {
        this.ws.close(1000);
      } catch {
        // already closing
      }
    };

    this.fail = fail;
    const onAbort = () => fail(abortError(o.signal));
    if (o.signal?.aborted) {
      queueMicrotask(onAbort);
    } else {
      o.signal?.addEventListener("abort", onAbort, { once: true });
    }
    const unlink = () => o.signal?.removeEventListener("abort", onAbort);

    let probing = false;
    const handshakeFailed = () => {
      if (probing || this.finished) return;
      probing = true;
      // Browsers do not show the HTTP answer of a refused handshake, so ask
      // the same URL without an upgrade to learn why (400, 401, 404 ...).
      void probe(t, httpURL).then(fail, fail);
    };
    this.ws.onopen = () => {
      open = true;
      resolveOpen();
      for (const m of this.queue) this.ws.send(m);
      this.queue = [];
    };
    this.ws.onmessage = (ev: MessageEvent) => {
      const m = toBytes(ev.data);
      if (!m || m.length === 0) return;
      const payload = m.subarray(1);
      switch (m[0]) {
        case Channel.Stdout:
          this.out.forEach((f) => f(payload));
          break;
        case Channel.Stderr:
          this.err.forEach((f) => f(payload));
          break;
        case Channel.Exit: {
          let ex: ExecExit;
          try {
            ex = JSON.parse(new TextDecoder().decode(payload)) as ExecExit;
          } catch (e) {
            fail(new Error(`envd: exec in ${id}: bad exit message: ${(e as Error).message}`));
            return;
          }
          this.finished = true;
          unlink();
          if (ex.error) {
            rejectExit(errorFromDetail(statusOfCode(ex.error.code), ex.error));
          } else {
            this.exitListeners.forEach((f) => f(ex.exit_code));
            resolveExit(ex.exit_code);
          }
          try {
            this.ws.close(1000);
          } catch {
            // the server closes too
          }
          break;
        }
        // Unknown channels are ignored.
      }
    };
    this.ws.onclose = (ev: CloseEvent) => {
      unlink();
      if (this.finished) return;
      if (!open) {
        handshakeFailed();
        return;
      }
      if (ev.code >= 4000 && ev.code < 5000) {
        fail(errorFromResponse(ev.code - 4000, "", ev.reason));
        return;
      }
      fail(new Error(`envd: exec in ${id}: the stream ended before the exit status (close ${ev.code}${ev.reason ? ": " + ev.reason : ""})`));
    };
    // Some implementations (Node 20's) report a refused handshake with an
    // error event only, no close; after the open, onclose says what happened.
    this.ws.onerror = () => {
      if (!open) handshakeFailed();
    };
  }

  /** Adds a listener of stdout; returns a function that removes it. */
  onStdout(f: (data: Uint8Array) => void): () => void {
    this.out.add(f);
    return () => this.out.delete(f);
  }

  /** Adds a listener of stderr (never used with tty); returns a function that removes it. */
  onStderr(f: (data: Uint8Array) => void): () => void {
    this.err.add(f);
    return () => this.err.delete(f);
  }

  /** Adds a listener of the exit code (a normal exit only). */
  onExit(f: (code: number) => void): () => void {
    this.exitListeners.add(f);
    return () => this.exitListeners.delete(f);
  }

  /** Sends bytes (strings as UTF-8) to the command's stdin, in chunks of at most 32 KiB. */
  write(data: string | Uint8Array): void {
    const b = typeof data === "string" ? new TextEncoder().encode(data) : data;
    for (let i = 0; i < b.length; i += CHUNK) this.sendFrame(Channel.Stdin, b.subarray(i, i + CHUNK));
  }

  /** Resizes the terminal (with tty). */
  resize(cols: number, rows: number): void {
    this.sendFrame(Channel.Resize, new TextEncoder().encode(JSON.stringify({ cols, rows })));
  }

  /** Closes the command's stdin (with tty: hangs up the terminal). */
  closeStdin(): void {
    this.sendFrame(Channel.EOF, new Uint8Array(0));
  }

  /** Ends the session: the server kills the command; exit rejects with an AbortError. */
  close(): void {
    this.fail(abortError());
  }

  private sendFrame(channel: number, payload: Uint8Array): void {
    if (this.finished) return;
    const m = new Uint8Array(1 + payload.length);
    m[0] = channel;
    m.set(payload, 1);
    if (this.ws.readyState === 1) this.ws.send(m);
    else if (this.ws.readyState === 0) this.queue.push(m);
  }
}

function toBytes(d: unknown): Uint8Array | undefined {
  if (d instanceof ArrayBuffer) return new Uint8Array(d);
  if (ArrayBuffer.isView(d)) return new Uint8Array(d.buffer, d.byteOffset, d.byteLength);
  return undefined; // text messages are not part of the protocol
}

/**
 * Learns why a WebSocket handshake failed by asking the same URL as plain
 * HTTP; what names the stream in the error when the probe cannot tell.
 */
export async function probe(t: Transport, httpURL: string, what = "exec"): Promise<EnvdError | Error> {
  try {
    const headers: Record<string, string> = { Accept: "application/json" };
    if (t.token) headers["Authorization"] = "Bearer " + t.token;
    const res = await t.o.fetch(httpURL, { headers });
    const text = await res.text().catch(() => "");
    if (!res.ok) {
      const e = errorFromResponse(res.status, res.statusText, text);
      // A well-formed request gets "not a WebSocket upgrade": the probe could
      // not see the handshake's own refusal (429 resource_exhausted, say).
      if (!(e.code === "invalid_argument" && /WebSocket upgrade/i.test(e.message))) return e;
    }
  } catch {
    // fall through
  }
  return new Error(`envd: ${what}: the WebSocket handshake failed (the server refused it or could not be reached)`);
}
