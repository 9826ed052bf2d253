// The SSE parser, and operation event streams that resume after a dropped
// connection, against a local node:http server.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { Client, NotFoundError, parseSSE } from "../../dist/index.js";
import { sendJSON, startHTTPServer } from "../helpers/httpserver.mjs";

function streamOf(chunks) {
  const enc = new TextEncoder();
  return new ReadableStream({
    start(ctl) {
      for (const c of chunks) ctl.enqueue(typeof c === "string" ? enc.encode(c) : c);
      ctl.close();
    },
  });
}

async function collect(chunks) {
  const out = [];
  for await (const m of parseSSE(streamOf(chunks))) out.push(m);
  return out;
}

describe("parseSSE", () => {
  test("fields, comments, multi-line data, default event type", async () => {
    const got = await collect([": keep-alive\n\n", "id: 3\nevent: spooled\ndata: {\"seq\":3}\n\n", "data: a\ndata: b\n\n"]);
    assert.deepEqual(got, [
      { id: "3", event: "spooled", data: '{"seq":3}' },
      { event: "message", data: "a\nb" },
    ]);
  });

  test("line ends CRLF, CR and LF, split anywhere between chunks", async () => {
    const text = "id: 1\r\nevent: a\r\ndata: x\r\n\r\nid: 2\revent: b\rdata: y\r\rid: 3\nevent: c\ndata: z\n\n";
    const want = [
      { id: "1", event: "a", data: "x" },
      { id: "2", event: "b", data: "y" },
      { id: "3", event: "c", data: "z" },
    ];
    for (let cut = 1; cut < text.length; cut++) {
      assert.deepEqual(await collect([text.slice(0, cut), text.slice(cut)]), want, `cut at ${cut}`);
    }
  });

  test("a multi-byte character split between chunks", async () => {
    const bytes = new TextEncoder().encode("data: héllo ☃\n\n");
    assert.deepEqual(await collect([bytes.subarray(0, 8), bytes.subarray(8, 15), bytes.subarray(15)]), [{ event: "message", data: "héllo ☃" }]);
  });

  test("an unterminated last event is not dispatched", async () => {
    assert.deepEqual(await collect(["data: done\n\n", "data: cut"]), [{ event: "message", data: "done" }]);
  });
});

const ev = (seq, type = "step") => ({ seq, at: "2026-11-30T00:00:00Z", type, message: `event ${seq}` });
const sse = (e) => `id: ${e.seq}\nevent: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`;
const end = (op) => `event: end\ndata: ${JSON.stringify(op)}\n\n`;
const finished = { id: "op-1", kind: "save", target: "i-1", state: "succeeded", result: { version: 2 } };

describe("operation event streams", () => {
  let srv;
  let behaviour;
  before(async () => {
    srv = await startHTTPServer((req, res, body, n) => behaviour(req, res, n));
  });
  after(() => srv.close());
  const client = (o = {}) => new Client({ url: srv.url, token: "t", pollIntervalMs: 10, ...o });

  test("resumes from the last event after a dropped connection, no gap, no repeat", async () => {
    srv.requests.length = 0;
    behaviour = (req, res, n) => {
      res.writeHead(200, { "Content-Type": "text/event-stream" });
      if (n === 1) {
        res.write(": keep-alive\n\n" + sse(ev(1)) + sse(ev(2)));
        // Drop the connection mid-stream, after a partial event.
        res.write("id: 3\nevent: step\ndata: {\"se");
        setTimeout(() => req.socket.destroy(), 20);
        return;
      }
      const lastID = Number(req.headers["last-event-id"]);
      for (let s = lastID + 1; s <= 4; s++) res.write(sse(ev(s)));
      res.end(end(finished));
    };
    const seen = [];
    const reconnects = [];
    const it = client().operations.events("op-1", { onReconnect: (last) => reconnects.push(last) });
    let r;
    while (!(r = await it.next()).done) seen.push(r.value.seq);
    assert.deepEqual(seen, [1, 2, 3, 4]);
    assert.deepEqual(r.value, finished);
    assert.deepEqual(reconnects, [2]);
    assert.equal(srv.requests.length, 2);
    assert.equal(srv.requests[0].headers["last-event-id"], undefined);
    assert.equal(srv.requests[1].headers["last-event-id"], "2");
    assert.equal(srv.requests[1].headers.accept, "text/event-stream");
    assert.equal(srv.requests[1].url, "/v1/operations/op-1/events");
  });

  test("wait() delivers each event once even when a server repeats one", async () => {
    srv.requests.length = 0;
    behaviour = (req, res, n) => {
      res.writeHead(200, { "Content-Type": "text/event-stream" });
      if (n === 1) {
        res.end(sse(ev(1)) + sse(ev(2))); // ends without the end event
        return;
      }
      res.end(sse(ev(2)) + sse(ev(3)) + end(finished));
    };
    const seen = [];
    const op = await client().operations.wait("op-1", { onEvent: (e) => seen.push(e.seq) });
    assert.deepEqual(seen, [1, 2, 3]);
    assert.equal(op.state, "succeeded");
  });

  test("after: starts after a seq seen before (another process)", async () => {
    srv.requests.length = 0;
    behaviour = (req, res) => {
      res.writeHead(200, { "Content-Type": "text/event-stream" });
      res.end(sse(ev(6)) + end(finished));
    };
    const seen = [];
    await client().operations.wait("op-1", { after: 5, onEvent: (e) => seen.push(e.seq) });
    assert.deepEqual(seen, [6]);
    assert.equal(srv.requests[0].headers["last-event-id"], "5");
  });

  test("an idle stream (no keep-alive) is taken as dropped and resumed", async () => {
    srv.requests.length = 0;
    behaviour = (req, res, n) => {
      res.writeHead(200, { "Content-Type": "text/event-stream" });
      if (n === 1) {
        res.write(sse(ev(1))); // then silence, connection open
        return;
      }
      res.end(sse(ev(2)) + end(finished));
    };
    const seen = [];
    const op = await client().operations.wait("op-1", { idleTimeoutMs: 1000, onEvent: (e) => seen.push(e.seq) });
    assert.deepEqual(seen, [1, 2]);
    assert.equal(op.id, "op-1");
  });

  test("an error event with a permanent code is thrown, not retried", async () => {
    srv.requests.length = 0;
    behaviour = (req, res) => {
      res.writeHead(200, { "Content-Type": "text/event-stream" });
      res.end(`event: error\ndata: ${JSON.stringify({ error: { code: "not_found", message: "operation op-x not found" } })}\n\n`);
    };
    await assert.rejects(client().operations.wait("op-x"), NotFoundError);
    assert.equal(srv.requests.length, 1);
  });

  test("falls back to polling when the stream keeps failing", async () => {
    srv.requests.length = 0;
    let polls = 0;
    behaviour = (req, res) => {
      if (req.headers.accept === "text/event-stream") return req.socket.destroy();
      if (req.url === "/v1/operations/op-1") {
        polls++;
        return sendJSON(res, 200, polls < 2 ? { ...finished, state: "running" } : finished);
      }
      const after = Number(new URL(req.url, srv.url).searchParams.get("after"));
      sendJSON(res, 200, [ev(1), ev(2)].filter((e) => e.seq > after));
    };
    const seen = [];
    const op = await client().operations.wait("op-1", { maxReconnects: 1, onEvent: (e) => seen.push(e.seq) });
    assert.deepEqual(seen, [1, 2]);
    assert.equal(op.state, "succeeded");
    assert.ok(srv.requests.some((r) => r.url.startsWith("/v1/operations/op-1/events?after=")));
  });

  test("breaking out of the loop closes the connection", async () => {
    let closed;
    const gone = new Promise((r) => (closed = r));
    behaviour = (req, res) => {
      res.writeHead(200, { "Content-Type": "text/event-stream" });
      res.write(sse(ev(1)));
      res.on("close", () => closed(true));
    };
    for await (const e of client().operations.events("op-1")) {
      assert.equal(e.seq, 1);
      break;
    }
    assert.equal(await Promise.race([gone, new Promise((r) => setTimeout(() => r(false), 2000))]), true);
  });

  test("aborting stops waiting", async () => {
    behaviour = (req, res) => {
      res.writeHead(200, { "Content-Type": "text/event-stream" });
      res.write(sse(ev(1)));
    };
    const ctl = new AbortController();
    const p = client().operations.wait("op-1", { signal: ctl.signal, onEvent: () => ctl.abort() });
    await assert.rejects(p, (e) => e.name === "AbortError");
  });
});
