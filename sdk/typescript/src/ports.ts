// Ports of an instance (docs/api.md, "Ports and preview URLs"): the ports
// it listens on, preview tokens, the project's public ports, the path-form
// proxy, and byte streams over a WebSocket (the TCP tunnel and the SSH
// endpoint).
import { EnvdError, errorFromResponse, makeError } from "./errors.js";
import { bearerSubprotocol, probe } from "./exec.js";
import { abortError, esc, newIdempotencyKey, type CallOptions, type CreateOptions, type Transport, type WebSocketConstructor } from "./http.js";
import type * as T from "./types.js";

/** The WebSocket subprotocol of GET /v1/instances/{i}/tcp/{port}. */
export const TUNNEL_SUBPROTOCOL = "v1.tcp.envd.dev";
/** The WebSocket subprotocol of GET /v1/instances/{i}/ssh. */
export const SSH_SUBPROTOCOL = "ssh.envd.dev";

/** The largest message a tunnel sends (the server accepts 1 MiB). */
const TUNNEL_CHUNK = 256 << 10;

export class Ports {
  constructor(private t: Transport) {}

  /** GET /v1/instances/{i}/ports: the TCP ports the running instance listens on. */
  async list(id: string, opts?: CallOptions): Promise<T.ListeningPort[]> {
    const l = await this.t.json<T.PortList>({ method: "GET", path: `/v1/instances/${esc(id)}/ports`, retry: "safe" }, opts);
    return l?.ports ?? [];
  }

  /**
   * POST /v1/instances/{i}/ports/{port}/token: a preview token for the port
   * and, when the node has a preview domain, its URL (the token in the
   * query once, then a cookie). ttl: a Go duration, default the server's (1h).
   */
  previewUrl(id: string, port: number, req: T.PreviewTokenRequest = {}, opts?: CallOptions): Promise<T.PreviewToken> {
    return this.t.json({ method: "POST", path: `/v1/instances/${esc(id)}/ports/${esc(port)}/token`, json: req, retry: "refused" }, opts);
  }

  /** GET /v1/projects/{p}/ports: the project's public ports. */
  publicPorts(project: string, opts?: CallOptions): Promise<T.ProjectPorts> {
    return this.t.json({ method: "GET", path: `/v1/projects/${esc(project)}/ports`, retry: "safe" }, opts);
  }

  /** PUT /v1/projects/{p}/ports: replaces the public ports (reached through the preview host without a token). */
  setPublicPorts(project: string, ports: number[], opts?: CallOptions): Promise<T.ProjectPorts> {
    const body: T.ProjectPorts = { public: ports };
    return this.t.json({ method: "PUT", path: `/v1/projects/${esc(project)}/ports`, json: body, retry: "safe" }, opts);
  }

  /** PUT /v1/projects/{p}/ports with both lists: public, and forwarded (absent keeps them). */
  setProjectPorts(project: string, body: T.ProjectPorts, opts?: CallOptions): Promise<T.ProjectPorts> {
    return this.t.json({ method: "PUT", path: `/v1/projects/${esc(project)}/ports`, json: body, retry: "safe" }, opts);
  }

  /** The path-form proxy URL of path on port (requests to it need the token as a bearer token). */
  url(id: string, port: number, path = "/"): string {
    // "" names the port's root without the slash (GET redirects to "/").
    if (path !== "" && !path.startsWith("/")) path = "/" + path;
    return `${this.t.base}/v1/instances/${esc(id)}/ports/${esc(port)}${path}`;
  }

  /**
   * A request to the instance's port through the path-form proxy
   * (/v1/instances/{i}/ports/{port}/{path}); path is sent as given (escape
   * it yourself) and may carry a query. The answer is returned as it is,
   * whatever its status, like fetch's: it is the instance's, or envd's own
   * refusal (an envd error body: 404 no such instance, 502
   * port_unreachable when nothing listens), which `EnvdError`s can be made
   * from with errorFromResponse. The token goes in the Authorization
   * header; the instance never sees it.
   */
  fetch(id: string, port: number, path = "/", init: RequestInit = {}): Promise<Response> {
    const headers = new Headers(init.headers);
    if (this.t.token) headers.set("Authorization", "Bearer " + this.t.token);
    return this.t.o.fetch(this.url(id, port, path), { ...init, headers });
  }

  /**
   * GET /v1/instances/{i}/tcp/{port}: a TCP connection to the port, as a
   * process in the instance reaches 127.0.0.1:port, carried over a
   * WebSocket. Nothing listening is a PortUnreachableError of `opened`.
   */
  tunnel(id: string, port: number, opts: { signal?: AbortSignal } = {}): ByteStream {
    // A WebSocket client cannot see why a handshake was refused; the server
    // refuses before the upgrade when nothing listens (502
    // port_unreachable), so that case is told by listing the ports.
    const explain = async (): Promise<EnvdError | undefined> => {
      try {
        const ports = await this.list(id, { signal: opts.signal });
        if (!ports.some((p) => p.port === port)) {
          return makeError(502, "port_unreachable", `port ${port} of instance ${id}: nothing listens on it`);
        }
      } catch (e) {
        if (e instanceof EnvdError) return e;
      }
      return undefined;
    };
    return new ByteStream(this.t, `/v1/instances/${esc(id)}/tcp/${esc(port)}`, TUNNEL_SUBPROTOCOL, opts.signal, explain);
  }
}

/**
 * A byte stream over a WebSocket: the TCP tunnel (ports.tunnel) and the SSH
 * endpoint (instances.ssh). Binary messages carry the bytes both ways; an
 * empty message ends the sender's direction (closeWrite, half-close).
 */
export class ByteStream {
  /** Resolves when the connection is open; rejects with the server's refusal (an EnvdError) or a network error. */
  readonly opened: Promise<void>;
  /** The bytes from the instance; ends at its half-close or the close. */
  readonly readable: ReadableStream<Uint8Array>;
  /** Resolves when the WebSocket is closed, with its close code. */
  readonly closed: Promise<number>;

  private ws: WebSocket;
  private queue: Uint8Array[] = [];
  private ended = false;

  /** @internal Use ports.tunnel or instances.ssh. */
  constructor(t: Transport, path: string, subprotocol: string, signal?: AbortSignal, explain?: () => Promise<EnvdError | undefined>) {
    const WS: WebSocketConstructor | undefined = t.o.WebSocket;
    if (!WS) throw new TypeError("envd: no WebSocket: pass ClientOptions.WebSocket (Node 20 has a global one with --experimental-websocket)");
    const httpURL = t.url(path);
    const protocols = [subprotocol];
    if (t.token) protocols.push(bearerSubprotocol(t.token));
    this.ws = new WS(httpURL.replace(/^http(s?):/, "ws$1:"), protocols);
    this.ws.binaryType = "arraybuffer";

    let resolveOpen!: () => void, rejectOpen!: (e: unknown) => void, resolveClosed!: (n: number) => void;
    this.opened = new Promise((res, rej) => ((resolveOpen = res), (rejectOpen = rej)));
    this.closed = new Promise((res) => (resolveClosed = res));
    this.opened.catch(() => {});
    let ctl!: ReadableStreamDefaultController<Uint8Array>;
    let done = false;
    const finish = (err?: unknown) => {
      if (done) return;
      done = true;
      try {
        if (err === undefined) ctl.close();
        else ctl.error(err);
      } catch {
        // already closed
      }
    };
    this.readable = new ReadableStream<Uint8Array>({
      start: (c) => void (ctl = c),
      cancel: () => this.close(),
    });

    let open = false;
    let probing = false;
    const refused = () => {
      if (probing) return;
      probing = true;
      void probe(t, httpURL, path)
        .then(async (e) => (e instanceof EnvdError ? e : ((await explain?.()) ?? e)))
        .then((e) => {
          rejectOpen(e);
          finish(e);
          resolveClosed(1006);
        });
    };
    const onAbort = () => {
      const e = abortError(signal);
      rejectOpen(e);
      finish(e);
      this.close();
    };
    if (signal?.aborted) queueMicrotask(onAbort);
    else signal?.addEventListener("abort", onAbort, { once: true });

    this.ws.onopen = () => {
      open = true;
      resolveOpen();
      for (const m of this.queue) this.ws.send(m);
      this.queue = [];
    };
    this.ws.onmessage = (ev: MessageEvent) => {
      const d = ev.data;
      const b = d instanceof ArrayBuffer ? new Uint8Array(d) : ArrayBuffer.isView(d) ? new Uint8Array(d.buffer, d.byteOffset, d.byteLength) : undefined;
      if (!b) return; // text messages are not part of the protocol
      if (b.length === 0) finish();
      else if (!done) ctl.enqueue(b);
    };
    this.ws.onclose = (ev: CloseEvent) => {
      signal?.removeEventListener("abort", onAbort);
      if (!open) return refused();
      if (ev.code >= 4000 && ev.code < 5000) finish(errorFromResponse(ev.code - 4000, "", ev.reason));
      else finish();
      resolveClosed(ev.code);
    };
    this.ws.onerror = () => {
      if (!open) refused();
    };
  }

  /** Sends bytes (strings as UTF-8); writes before the open are queued. */
  write(data: string | Uint8Array): void {
    const b = typeof data === "string" ? new TextEncoder().encode(data) : data;
    for (let i = 0; i < b.length; i += TUNNEL_CHUNK) this.send(b.slice(i, i + TUNNEL_CHUNK));
  }

  /** Ends the direction towards the instance (the server shuts down writing to the port). */
  closeWrite(): void {
    if (!this.ended) this.send(new Uint8Array(0));
    this.ended = true;
  }

  /** Closes the connection. */
  close(): void {
    try {
      this.ws.close(1000);
    } catch {
      // already closing
    }
  }

  private send(m: Uint8Array): void {
    if (this.ws.readyState === 1) this.ws.send(m);
    else if (this.ws.readyState === 0) this.queue.push(m);
  }
}

export class SshKeys {
  constructor(private t: Transport) {}

  /** GET /v1/ssh-keys: the caller's tenant's public keys. */
  list(opts?: CallOptions): Promise<T.SSHKey[]> {
    return this.t.json({ method: "GET", path: "/v1/ssh-keys", retry: "safe" }, opts);
  }

  /** POST /v1/ssh-keys: registers a public key (authorized_keys form). Not retried after a network error. */
  add(req: T.AddSSHKeyRequest, opts?: CallOptions): Promise<T.SSHKey> {
    return this.t.json({ method: "POST", path: "/v1/ssh-keys", json: req, retry: "refused" }, opts);
  }

  /** DELETE /v1/ssh-keys/{id}: answers the removed key. */
  remove(id: number, opts?: CallOptions): Promise<T.SSHKey> {
    return this.t.json({ method: "DELETE", path: `/v1/ssh-keys/${esc(id)}`, retry: "safe" }, opts);
  }
}

export class Webhooks {
  constructor(private t: Transport) {}

  /** POST /v1/webhooks: registers a webhook; the answer alone carries its secret. Not retried after a network error. */
  create(req: T.WebhookRequest, opts?: CallOptions): Promise<T.Webhook> {
    return this.t.json({ method: "POST", path: "/v1/webhooks", json: req, retry: "refused" }, opts);
  }

  /** GET /v1/webhooks: the caller's tenant's webhooks, without secrets. */
  list(opts?: CallOptions): Promise<T.Webhook[]> {
    return this.t.json({ method: "GET", path: "/v1/webhooks", retry: "safe" }, opts);
  }

  /** DELETE /v1/webhooks/{id}: answers the removed webhook. */
  remove(id: string, opts?: CallOptions): Promise<T.Webhook> {
    return this.t.json({ method: "DELETE", path: `/v1/webhooks/${esc(id)}`, retry: "safe" }, opts);
  }

  /** POST /v1/webhooks/{id}/test: queues a webhook.test event for this webhook; answers the pending delivery. */
  test(id: string, opts?: CallOptions): Promise<T.WebhookDelivery> {
    return this.t.json({ method: "POST", path: `/v1/webhooks/${esc(id)}/test`, retry: "refused" }, opts);
  }

  /** GET /v1/webhooks/{id}/deliveries: the newest deliveries, newest first. */
  deliveries(id: string, opts?: CallOptions): Promise<T.WebhookDelivery[]> {
    return this.t.json({ method: "GET", path: `/v1/webhooks/${esc(id)}/deliveries`, retry: "safe" }, opts);
  }
}

export class Rollouts {
  constructor(private t: Transport) {}

  /**
   * POST /v1/admin/rollouts (admin): migrates every selected project from
   * one base to another, in waves, validating each. With an
   * Idempotency-Key (made here when not given), retried.
   */
  create(req: T.CreateRolloutRequest, opts: CreateOptions = {}): Promise<T.Rollout> {
    const key = opts.idempotencyKey ?? newIdempotencyKey();
    return this.t.json({ method: "POST", path: "/v1/admin/rollouts", json: req, headers: { "Idempotency-Key": key }, retry: "safe" }, opts);
  }

  /** GET /v1/admin/rollouts (admin), without their per-project lists. */
  list(opts?: CallOptions): Promise<T.Rollout[]> {
    return this.t.json({ method: "GET", path: "/v1/admin/rollouts", retry: "safe" }, opts);
  }

  /** GET /v1/admin/rollouts/{id} (admin), with every project's status. */
  get(id: string, opts?: CallOptions): Promise<T.Rollout> {
    return this.t.json({ method: "GET", path: `/v1/admin/rollouts/${esc(id)}`, retry: "safe" }, opts);
  }

  private action(id: string, action: string, opts?: CallOptions): Promise<T.Rollout> {
    return this.t.json({ method: "POST", path: `/v1/admin/rollouts/${esc(id)}/${action}`, retry: "refused" }, opts);
  }

  /** POST .../pause: no new wave starts; the running one finishes. */
  pause(id: string, opts?: CallOptions): Promise<T.Rollout> {
    return this.action(id, "pause", opts);
  }
  /** POST .../resume. */
  resume(id: string, opts?: CallOptions): Promise<T.Rollout> {
    return this.action(id, "resume", opts);
  }
  /** POST .../cancel: pending projects are skipped; switched ones stay. */
  cancel(id: string, opts?: CallOptions): Promise<T.Rollout> {
    return this.action(id, "cancel", opts);
  }
  /**
   * POST .../rollback: switched projects go back to their old version where
   * current did not move since. Answers the rollback's operation (kind
   * rollback; its result the Rollout): follow it with operations.wait.
   * Asking again is safe (the rollback running, or the one that finished
   * it, is answered), so it is retried.
   */
  rollback(id: string, opts?: CallOptions): Promise<T.Operation<T.Rollout>> {
    return this.t.json({ method: "POST", path: `/v1/admin/rollouts/${esc(id)}/rollback`, retry: "safe" }, opts);
  }
}
