// Error mapping, retries with idempotency keys, time limits and aborts,
// against a local node:http server.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import {
  Client,
  ConflictError,
  EnvdError,
  FailedPreconditionError,
  NotFoundError,
  QuotaExceededError,
  ResourceExhaustedError,
  UnavailableError,
  errorFromResponse,
} from "../../dist/index.js";
import { sendError, sendJSON, startHTTPServer } from "../helpers/httpserver.mjs";

describe("errorFromResponse", () => {
  const cases = [
    {
      name: "known code gives its class, status and details",
      status: 409,
      body: JSON.stringify({ error: { code: "failed_precondition", message: "instance is Paused", details: { state: "Paused" } } }),
      cls: FailedPreconditionError,
      code: "failed_precondition",
      details: { state: "Paused" },
    },
    {
      name: "conflict",
      status: 409,
      body: JSON.stringify({ error: { code: "conflict", message: "current is 3, not 2" } }),
      cls: ConflictError,
      code: "conflict",
    },
    {
      name: "quota details",
      status: 507,
      body: JSON.stringify({ error: { code: "quota_exceeded", message: "q", details: { quota: "instances", limit: 1, used: 1, requested: 1 } } }),
      cls: QuotaExceededError,
      code: "quota_exceeded",
      details: { quota: "instances", limit: 1, used: 1, requested: 1 },
    },
    {
      name: "unknown code stays a plain EnvdError with its code",
      status: 418,
      body: JSON.stringify({ error: { code: "teapot_overflow", message: "new in a later server" } }),
      cls: EnvdError,
      code: "teapot_overflow",
      exactBase: true,
    },
    { name: "proxy's 502 without a body", status: 502, body: "<html>bad gateway</html>", cls: UnavailableError, code: "unavailable" },
    { name: "unknown status without a body", status: 418, body: "", cls: EnvdError, code: "internal" },
  ];
  for (const c of cases) {
    test(c.name, () => {
      const e = errorFromResponse(c.status, "Status", c.body);
      assert.ok(e instanceof c.cls, `${e.constructor.name} is not ${c.cls.name}`);
      assert.ok(e instanceof EnvdError);
      assert.ok(e instanceof Error);
      if (c.exactBase) assert.equal(e.constructor, EnvdError);
      assert.equal(e.status, c.status);
      assert.equal(e.code, c.code);
      if (c.details) assert.deepEqual(e.details, c.details);
      assert.ok(e.message.length > 0);
    });
  }
});

describe("transport", () => {
  let srv;
  let behaviour;
  before(async () => {
    srv = await startHTTPServer((req, res, body, n) => behaviour(req, res, body, n));
  });
  after(() => srv.close());
  const client = (o = {}) => new Client({ url: srv.url, token: "tok-1", retryDelayMs: 5, ...o });

  test("sends the bearer token and maps an error answer", async () => {
    srv.requests.length = 0;
    behaviour = (req, res) => sendError(res, 404, "not_found", `project "nope" not found`);
    await assert.rejects(client().projects.get("nope"), (e) => {
      assert.ok(e instanceof NotFoundError);
      assert.equal(e.status, 404);
      assert.equal(e.message, `project "nope" not found`);
      return true;
    });
    assert.equal(srv.requests.length, 1, "a permanent error is not retried");
    assert.equal(srv.requests[0].headers.authorization, "Bearer tok-1");
    assert.equal(srv.requests[0].url, "/v1/projects/nope");
  });

  test("a creating call is retried after 503 with the same Idempotency-Key", async () => {
    srv.requests.length = 0;
    behaviour = (req, res, body, n) => {
      if (n < 3) return sendError(res, 503, "unavailable", "database down");
      sendJSON(res, 201, { name: "web", base_image: "busybox", current_version: 1 });
    };
    const p = await client().projects.create({ name: "web", base: "busybox" });
    assert.equal(p.name, "web");
    assert.equal(srv.requests.length, 3);
    const keys = srv.requests.map((r) => r.headers["idempotency-key"]);
    assert.ok(keys[0] && keys[0].length > 8, "a key is made");
    assert.deepEqual(new Set(keys).size, 1, "the same key on every retry");
    assert.deepEqual(JSON.parse(srv.requests[2].body), { name: "web", base: "busybox" });
  });

  test("a given Idempotency-Key is sent as it is", async () => {
    srv.requests.length = 0;
    behaviour = (req, res) => sendJSON(res, 202, { id: "op-1", kind: "save", state: "pending" });
    await client().instances.save("web-1", { message: "m" }, { idempotencyKey: "my-key-1" });
    assert.equal(srv.requests[0].headers["idempotency-key"], "my-key-1");
    assert.equal(srv.requests[0].url, "/v1/instances/web-1/save");
  });

  test("a network error is retried for a GET", async () => {
    srv.requests.length = 0;
    behaviour = (req, res, body, n) => {
      if (n === 1) return req.socket.destroy();
      sendJSON(res, 200, [{ name: "busybox" }]);
    };
    const imgs = await client().images.list();
    assert.equal(imgs[0].name, "busybox");
    assert.equal(srv.requests.length, 2);
  });

  test("an exec is not retried after 503 (it may have run), but is after 429", async () => {
    srv.requests.length = 0;
    behaviour = (req, res) => sendError(res, 503, "unavailable", "runtime down");
    await assert.rejects(client().instances.exec("i-1", { args: ["true"] }), UnavailableError);
    assert.equal(srv.requests.length, 1);

    srv.requests.length = 0;
    behaviour = (req, res, body, n) => {
      if (n === 1) return sendError(res, 429, "resource_exhausted", "too many execs", { kind: "exec", limit: 32 }, { "Retry-After": "0" });
      sendJSON(res, 200, { exit_code: 0, stdout: "ok\n", stderr: "" });
    };
    const r = await client().instances.exec("i-1", { args: ["echo", "ok"] });
    assert.equal(r.stdout, "ok\n");
    assert.equal(srv.requests.length, 2);
  });

  test("429 after the last retry is a ResourceExhaustedError with retryAfter", async () => {
    srv.requests.length = 0;
    behaviour = (req, res) => sendError(res, 429, "resource_exhausted", "saves", { kind: "saves", limit: 4 }, { "Retry-After": "0" });
    await assert.rejects(client({ retries: 1 }).instances.save("i-1"), (e) => {
      assert.ok(e instanceof ResourceExhaustedError);
      assert.equal(e.retryAfter, 0);
      assert.equal(e.details.kind, "saves");
      return true;
    });
    assert.equal(srv.requests.length, 2);
  });

  test("AbortSignal and timeoutMs end a request", async () => {
    behaviour = () => {}; // never answers
    const ctl = new AbortController();
    const p = client().info({ signal: ctl.signal });
    setTimeout(() => ctl.abort(), 20);
    await assert.rejects(p, (e) => e.name === "AbortError");
    await assert.rejects(client({ timeoutMs: 30 }).info(), (e) => e.name === "TimeoutError");
  });

  test("a failed operation's error is thrown by result()", async () => {
    behaviour = (req, res) => {
      if (req.url.includes("/events")) {
        res.writeHead(200, { "Content-Type": "text/event-stream" });
        res.end(`event: end\ndata: ${JSON.stringify({ id: "op-9", state: "failed", error: { code: "quota_exceeded", message: "versions" } })}\n\n`);
        return;
      }
      sendError(res, 500, "internal", "unexpected");
    };
    await assert.rejects(client().operations.result("op-9"), (e) => {
      assert.ok(e instanceof QuotaExceededError);
      assert.equal(e.status, 507);
      return true;
    });
  });
});
