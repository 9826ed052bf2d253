// Files, ports, SSH keys, rollouts, readiness: what each call sends and how
// it reads the answer, against recording servers (node:http, and the
// hand-written WebSocket server for the tunnel and the SSH stream).
import assert from "node:assert/strict";
import { afterEach, describe, test } from "node:test";

import { Client, PortUnreachableError, InvalidArgumentError, NotFoundError } from "../../dist/index.js";
import { sendError, sendJSON, startHTTPServer } from "../helpers/httpserver.mjs";
import { startWSServer } from "../helpers/wsserver.mjs";

const dec = new TextDecoder();
let srv;
afterEach(async () => {
  await srv?.close();
  srv = undefined;
});
const client = (o = {}) => new Client({ url: srv.url, token: "t", ...o });

async function collect(stream) {
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  return Buffer.concat(chunks);
}

describe("requests with JSON bodies", () => {
  const K = "Idempotency-Key";
  const cases = [
    ["files.mkdir", (c) => c.files.mkdir("i", "/w/d", { parents: true, mode: "0700", user: "dev" }), "POST", "/v1/instances/i/files/mkdir?user=dev", { path: "/w/d", mode: "0700", parents: true }],
    ["files.move", (c) => c.files.move("i", "/a", "/b", { overwrite: true }), "POST", "/v1/instances/i/files/move", { from: "/a", to: "/b", overwrite: true }],
    ["files.copy as uid", (c) => c.files.copy("i", "/a", "/b", { uid: 1000, gid: 100 }), "POST", "/v1/instances/i/files/copy?uid=1000&gid=100", { from: "/a", to: "/b" }],
    ["files.remove", (c) => c.files.remove("i", "/w/d", { recursive: true }), "DELETE", "/v1/instances/i/files?path=%2Fw%2Fd&recursive=1"],
    ["ports.list", (c) => c.ports.list("i"), "GET", "/v1/instances/i/ports"],
    ["ports.previewUrl", (c) => c.ports.previewUrl("i", 8080, { ttl: "10m" }), "POST", "/v1/instances/i/ports/8080/token", { ttl: "10m" }],
    ["ports.publicPorts", (c) => c.ports.publicPorts("p"), "GET", "/v1/projects/p/ports"],
    ["ports.setPublicPorts", (c) => c.ports.setPublicPorts("p", [3000, 8080]), "PUT", "/v1/projects/p/ports", { public: [3000, 8080] }],
    ["sshKeys.list", (c) => c.sshKeys.list(), "GET", "/v1/ssh-keys"],
    ["sshKeys.add", (c) => c.sshKeys.add({ public_key: "ssh-ed25519 AAAA", name: "laptop" }), "POST", "/v1/ssh-keys", { public_key: "ssh-ed25519 AAAA", name: "laptop" }],
    ["sshKeys.remove", (c) => c.sshKeys.remove(4), "DELETE", "/v1/ssh-keys/4"],
    ["rollouts.create", (c) => c.rollouts.create({ from: "a", to: "b", dry_run: true, wave_size: 2 }), "POST", "/v1/admin/rollouts", { from: "a", to: "b", dry_run: true, wave_size: 2 }, [K]],
    ["rollouts.list", (c) => c.rollouts.list(), "GET", "/v1/admin/rollouts"],
    ["rollouts.get", (c) => c.rollouts.get("ro-1"), "GET", "/v1/admin/rollouts/ro-1"],
    ["rollouts.pause", (c) => c.rollouts.pause("ro-1"), "POST", "/v1/admin/rollouts/ro-1/pause"],
    ["rollouts.resume", (c) => c.rollouts.resume("ro-1"), "POST", "/v1/admin/rollouts/ro-1/resume"],
    ["rollouts.cancel", (c) => c.rollouts.cancel("ro-1"), "POST", "/v1/admin/rollouts/ro-1/cancel"],
    ["rollouts.rollback", (c) => c.rollouts.rollback("ro-1"), "POST", "/v1/admin/rollouts/ro-1/rollback"],
    ["projects.setValidation", (c) => c.projects.setValidation("p", { validate: [["true"]] }), "PUT", "/v1/projects/p/validation", { validate: [["true"]] }],
    ["images.pull", (c) => c.images.pull("alpine", "127.0.0.1:5000/alpine:3"), "POST", "/v1/images?name=alpine&ref=127.0.0.1%3A5000%2Falpine%3A3"],
  ];
  for (const [name, call, method, path, body, headers = []] of cases) {
    test(name, async () => {
      srv = await startHTTPServer((req, res) => sendJSON(res, 200, {}));
      await call(client());
      const r = srv.requests[0];
      assert.equal(r.method, method);
      assert.equal(r.url, path);
      assert.equal(r.headers.authorization, "Bearer t");
      if (body === undefined) assert.equal(r.body, "");
      else assert.deepEqual(JSON.parse(r.body), body);
      for (const h of headers) assert.ok(r.headers[h.toLowerCase()], h);
      if (!headers.includes(K)) assert.equal(r.headers["idempotency-key"], undefined);
    });
  }
});

describe("files", () => {
  test("list answers the FileList; a file is an InvalidArgumentError", async () => {
    const listing = { path: "/w", entries: [{ name: "a", path: "/w/a", type: "file", size: 1, mode: "0644", mtime: "2026-11-30T00:00:00Z", uid: 0, gid: 0 }] };
    srv = await startHTTPServer((req, res) => {
      if (req.url.includes("path=%2Fw&")) sendJSON(res, 200, listing, { "X-Envd-File-Type": "dir" });
      else res.writeHead(200, { "X-Envd-File-Type": "file", "Content-Type": "text/plain" }).end("x");
    });
    assert.deepEqual(await client().files.list("i", "/w", { user: "root" }), listing);
    assert.equal(srv.requests[0].url, "/v1/instances/i/files?path=%2Fw&user=root");
    await assert.rejects(client().files.list("i", "/w/a"), InvalidArgumentError);
  });

  test("read: Range of offset and length, bytes, type, size from Content-Range", async () => {
    srv = await startHTTPServer((req, res) => {
      const headers = { "X-Envd-File-Type": "file", "Content-Type": "text/plain; charset=utf-8", "Last-Modified": "Mon, 30 Nov 2026 00:00:00 GMT" };
      if (req.headers.range === "bytes=2-4") return res.writeHead(206, { ...headers, "Content-Range": "bytes 2-4/10" }).end("cde");
      if (req.headers.range === "bytes=8-") return res.writeHead(206, { ...headers, "Content-Range": "bytes 8-9/10", "X-Envd-Read-Only": "true" }).end("ij");
      if (req.headers.range) return sendError(res, 416, "invalid_argument", "range");
      res.writeHead(200, headers).end("abcdefghij");
    });
    const c = client();
    const part = await c.files.read("i", "/f", { offset: 2, length: 3 });
    assert.equal(dec.decode(part.data), "cde");
    assert.deepEqual([part.offset, part.size, part.contentType, part.readOnly], [2, 10, "text/plain; charset=utf-8", false]);
    assert.equal(part.modified, "Mon, 30 Nov 2026 00:00:00 GMT");
    const tail = await c.files.read("i", "/f", { offset: 8 });
    assert.deepEqual([dec.decode(tail.data), tail.offset, tail.readOnly], ["ij", 8, true]);
    assert.equal(await c.files.readText("i", "/f"), "abcdefghij");
    assert.equal(srv.requests.at(-1).headers.range, undefined, "a whole read sends no Range");
    await assert.rejects(c.files.read("i", "/f", { offset: 50, length: 1 }), InvalidArgumentError);
    await assert.rejects(c.files.read("i", "/f", { length: 0 }), RangeError);
  });

  test("read of a directory is an InvalidArgumentError", async () => {
    srv = await startHTTPServer((req, res) => sendJSON(res, 200, { path: "/", entries: [] }, { "X-Envd-File-Type": "dir" }));
    await assert.rejects(client().files.read("i", "/"), InvalidArgumentError);
  });

  test("write: PUT with the raw bytes, mode and mkdir in the query", async () => {
    srv = await startHTTPServer((req, res) => sendJSON(res, 200, { path: "/w/a b", size: 5 }));
    const fi = await client().files.write("i", "/w/a b", "hello", { mode: "0600", mkdir: true });
    assert.equal(fi.size, 5);
    const r = srv.requests[0];
    assert.equal(r.method, "PUT");
    assert.equal(r.url, "/v1/instances/i/files?path=%2Fw%2Fa+b&mode=0600&mkdir=1");
    assert.equal(r.headers["content-type"], "application/octet-stream");
    assert.equal(r.body, "hello");
    await client().files.write("i", "/b", new Uint8Array([0, 255]));
    assert.deepEqual([...srv.requests[1].raw], [0, 255]);
  });

  test("download streams the archive; upload tells gzip, zstd and tar apart", async () => {
    srv = await startHTTPServer((req, res) => {
      if (req.method === "GET") return res.writeHead(200, { "Content-Type": "application/x-tar" }).end("TARBYTES");
      sendJSON(res, 200, { path: "/dst", entries: 3 });
    });
    const c = client();
    const s = await c.files.download("i", "/src", { format: "tar.zst" });
    assert.equal((await collect(s)).toString(), "TARBYTES");
    assert.equal(srv.requests[0].url, "/v1/instances/i/files/archive?path=%2Fsrc&format=tar.zst");
    const inputs = [
      [new Uint8Array(1024), "application/x-tar"],
      [new Uint8Array([0x1f, 0x8b, 8, 0]), "application/gzip"],
      [new Blob([new Uint8Array([0x28, 0xb5, 0x2f, 0xfd, 0])]), "application/zstd"],
    ];
    for (const [body, ct] of inputs) {
      const r = await c.files.upload("i", "/dst", body, { mkdir: true });
      assert.deepEqual(r, { path: "/dst", entries: 3 });
      const got = srv.requests.at(-1);
      assert.equal(got.url, "/v1/instances/i/files/archive?path=%2Fdst&mkdir=1");
      assert.equal(got.headers["content-type"], ct);
    }
  });

  test("watch yields the events and ends at the end event; error events throw", async () => {
    srv = await startHTTPServer((req, res) => {
      res.writeHead(200, { "Content-Type": "text/event-stream" });
      if (req.url.includes("recursive=1")) {
        res.write(": keep-alive\n\n");
        res.write(`event: create\ndata: ${JSON.stringify({ type: "create", path: "/w/a", time: "t" })}\n\n`);
        res.write(`event: move\ndata: ${JSON.stringify({ type: "move", path: "/w/b", from: "/w/a", time: "t" })}\n\n`);
        res.end(`event: end\ndata: {"reason":"gone"}\n\n`);
      } else {
        res.end(`event: error\ndata: ${JSON.stringify({ error: { code: "not_found", message: "no such directory" } })}\n\n`);
      }
    });
    const got = [];
    for await (const ev of client().files.watch("i", "/w", { recursive: true })) got.push([ev.type, ev.path, ev.from]);
    assert.deepEqual(got, [
      ["create", "/w/a", undefined],
      ["move", "/w/b", "/w/a"],
    ]);
    assert.equal(srv.requests[0].headers.accept, "text/event-stream");
    await assert.rejects(async () => {
      for await (const _ of client().files.watch("i", "/gone")) void _;
    }, NotFoundError);
  });
});

describe("ports", () => {
  test("fetch goes through the path-form proxy with the token and returns the answer as it is", async () => {
    srv = await startHTTPServer((req, res) => res.writeHead(418, { "Content-Type": "text/plain" }).end("teapot " + req.url));
    const res = await client().ports.fetch("i", 3000, "/api/x?y=1", { method: "POST", body: "b", headers: { "X-A": "1" } });
    assert.equal(res.status, 418);
    assert.equal(await res.text(), "teapot /v1/instances/i/ports/3000/api/x?y=1");
    const r = srv.requests[0];
    assert.deepEqual([r.method, r.body, r.headers.authorization, r.headers["x-a"]], ["POST", "b", "Bearer t", "1"]);
    assert.equal(client().ports.url("i", 3000, "a"), `${srv.url}/v1/instances/i/ports/3000/a`);
  });

  test("list unwraps the PortList", async () => {
    srv = await startHTTPServer((req, res) => sendJSON(res, 200, { ports: [{ address: "127.0.0.1", port: 8080, protocol: "tcp", public: false }] }));
    assert.deepEqual((await client().ports.list("i")).map((p) => p.port), [8080]);
  });

  test("tunnel: bytes both ways, half-close, the tunnel subprotocol and the bearer one", async () => {
    const got = [];
    srv = await startWSServer({
      onConnect(c) {
        c.onmessage = (_ch, _p, msg) => {
          got.push(msg.toString());
          if (msg.length === 0) {
            c.writeFrame(0x2, Buffer.from("pong"));
            c.writeFrame(0x2, Buffer.alloc(0));
          }
        };
      },
    });
    const t = client().ports.tunnel("i", 5432);
    t.write("ping");
    t.closeWrite();
    await t.opened;
    assert.equal((await collect(t.readable)).toString(), "pong");
    assert.deepEqual(got, ["ping", ""]);
    const conn = srv.conns[0];
    assert.equal(conn.req.url, "/v1/instances/i/tcp/5432");
    assert.equal(conn.protocols[0], "v1.tcp.envd.dev");
    assert.match(conn.protocols[1], /^base64url\.bearer\.envd\.dev\./);
    t.close();
  });

  test("tunnel: a refused handshake rejects opened with the server's error", async () => {
    srv = await startWSServer({
      refuse: () => [502, { error: { code: "port_unreachable", message: "nothing listens on port 1" } }],
      onRequest: (req, res) => sendError(res, 502, "port_unreachable", "nothing listens on port 1"),
    });
    const t = client().ports.tunnel("i", 1);
    await assert.rejects(t.opened, PortUnreachableError);
    await assert.rejects(collect(t.readable), PortUnreachableError);
  });

  test("tunnel: a refusal the probe cannot see is told from the port list", async () => {
    let listening = [];
    srv = await startWSServer({
      refuse: () => [502, { error: { code: "port_unreachable", message: "nothing listens" } }],
      onRequest: (req, res) =>
        req.url.endsWith("/ports")
          ? sendJSON(res, 200, { ports: listening })
          : sendError(res, 400, "invalid_argument", "tcp tunnel: the request is not a WebSocket upgrade (Upgrade: websocket)"),
    });
    await assert.rejects(client().ports.tunnel("i", 7).opened, PortUnreachableError);
    listening = [{ address: "127.0.0.1", port: 7, protocol: "tcp", public: false }];
    await assert.rejects(client().ports.tunnel("i", 7).opened, (e) => !(e instanceof PortUnreachableError) && /handshake failed/.test(e.message));
  });

  test("instances.ssh: a refused handshake of an unknown instance is its NotFoundError", async () => {
    srv = await startWSServer({
      refuse: () => [404, { error: { code: "not_found", message: "no instance" } }],
      onRequest: (req, res) =>
        req.url.endsWith("/ssh")
          ? sendError(res, 400, "invalid_argument", "ssh tunnel: the request is not a WebSocket upgrade (Upgrade: websocket)")
          : sendError(res, 404, "not_found", `instance ${req.url.split("/").pop()}: not found`),
    });
    await assert.rejects(client().instances.ssh("gone").opened, (e) => e instanceof NotFoundError && /instance gone/.test(e.message));
  });

  test("instances.ssh: a byte stream on the SSH subprotocol", async () => {
    srv = await startWSServer({
      onConnect(c) {
        c.writeFrame(0x2, Buffer.from("SSH-2.0-envd\r\n"));
      },
    });
    const s = client().instances.ssh("i");
    const reader = s.readable.getReader();
    const { value } = await reader.read();
    assert.equal(dec.decode(value), "SSH-2.0-envd\r\n");
    assert.equal(srv.conns[0].req.url, "/v1/instances/i/ssh");
    assert.equal(srv.conns[0].protocols[0], "ssh.envd.dev");
    s.close();
  });
});

describe("server", () => {
  test("readyz returns the checks on 200 and on 503", async () => {
    let ready = true;
    srv = await startHTTPServer((req, res) =>
      sendJSON(res, ready ? 200 : 503, { status: ready ? "ready" : "not_ready", checks: { db: { status: ready ? "ok" : "failed", duration_ms: 1 } } }),
    );
    assert.equal((await client().readyz()).status, "ready");
    ready = false;
    const r = await client().readyz();
    assert.deepEqual([r.status, r.checks.db.status], ["not_ready", "failed"]);
  });

  test("metrics returns the text", async () => {
    srv = await startHTTPServer((req, res) => res.writeHead(200, { "Content-Type": "text/plain" }).end("envd_up 1\n"));
    assert.equal(await client().metrics(), "envd_up 1\n");
    assert.equal(srv.requests[0].url, "/metrics");
  });

  test("projects.validation reads the project's validate", async () => {
    srv = await startHTTPServer((req, res) => sendJSON(res, 200, { name: "p", validate: [["dot", "-V"]] }));
    assert.deepEqual(await client().projects.validation("p"), { validate: [["dot", "-V"]] });
    assert.equal(srv.requests[0].url, "/v1/projects/p");
  });

  test("versions.export streams the tar", async () => {
    srv = await startHTTPServer((req, res) => res.writeHead(200, { "Content-Type": "application/x-tar" }).end("OCI"));
    assert.equal((await collect(await client().versions.export("p", 3))).toString(), "OCI");
    assert.equal(srv.requests[0].url, "/v1/projects/p/versions/3/export");
  });
});
