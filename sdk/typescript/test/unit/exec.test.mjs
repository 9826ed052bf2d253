// The exec WebSocket's framing, authentication subprotocol, exit and error
// handling, and attachTerminal, against a WebSocket server written by hand
// (test/helpers/wsserver.mjs).
import assert from "node:assert/strict";
import { afterEach, describe, test } from "node:test";

import { attachTerminal, bearerSubprotocol, Client, FailedPreconditionError, NotFoundError } from "../../dist/index.js";
import { sendError } from "../helpers/httpserver.mjs";
import { startWSServer } from "../helpers/wsserver.mjs";

const dec = new TextDecoder();
let srv;
afterEach(async () => {
  await srv?.close();
  srv = undefined;
});
const client = () => new Client({ url: srv.url, token: "s3cret/tok+en?" });

describe("exec stream", () => {
  test("bearerSubprotocol is base64url without padding", () => {
    assert.equal(bearerSubprotocol("s3cret/tok+en?"), "base64url.bearer.envd.dev." + Buffer.from("s3cret/tok+en?").toString("base64url"));
    assert.doesNotMatch(bearerSubprotocol("a"), /[=+/]/);
  });

  test("query, subprotocols, stdin, stdout, stderr, EOF and exit code", async () => {
    const got = { stdin: [], channels: [] };
    srv = await startWSServer({
      onConnect(c) {
        c.onmessage = (ch, payload) => {
          got.channels.push(ch);
          if (ch === 0) {
            got.stdin.push(payload.toString());
            c.send(1, payload.toString().toUpperCase());
            c.send(2, "warn:" + payload.toString());
          }
          if (ch === 5) c.exit({ exit_code: 7 });
        };
      },
    });
    let out = "";
    let err = "";
    const s = client().instances.execStream("web-1", {
      args: ["sh", "-c", "cat; exit 7"],
      env: ["A=1", "B=2"],
      cwd: "/src",
      onStdout: (b) => (out += dec.decode(b)),
    });
    s.onStderr((b) => (err += dec.decode(b)));
    s.write("hello "); // queued before the connection is open
    await s.opened;
    s.write(new TextEncoder().encode("world"));
    s.closeStdin();
    assert.equal(await s.exit, 7);
    assert.equal(out, "HELLO WORLD");
    assert.equal(err, "warn:hello warn:world");
    assert.deepEqual(got.stdin, ["hello ", "world"]);
    assert.deepEqual(got.channels, [0, 0, 5]);

    const c = srv.conns[0];
    const u = new URL(c.req.url, srv.url);
    assert.equal(u.pathname, "/v1/instances/web-1/exec/ws");
    assert.deepEqual(u.searchParams.getAll("cmd"), ["sh", "-c", "cat; exit 7"]);
    assert.deepEqual(u.searchParams.getAll("env"), ["A=1", "B=2"]);
    assert.equal(u.searchParams.get("cwd"), "/src");
    assert.equal(u.searchParams.get("tty"), null);
    assert.deepEqual(c.protocols, ["v1.exec.envd.dev", bearerSubprotocol("s3cret/tok+en?")]);
    assert.equal(c.req.headers.authorization, undefined, "browsers cannot send it; the subprotocol carries the token");
    assert.doesNotMatch(c.req.url, /s3cret/, "never a token in the URL");
  });

  test("large stdin is sent in messages of at most 32 KiB", async () => {
    const sizes = [];
    let total = 0;
    srv = await startWSServer({
      onConnect(c) {
        c.onmessage = (ch, payload) => {
          if (ch === 0) {
            sizes.push(payload.length);
            total += payload.length;
          }
          if (ch === 5) c.exit({ exit_code: 0 });
        };
      },
    });
    const s = client().instances.execStream("i", { args: ["cat"] });
    s.write(new Uint8Array(100_000).fill(97));
    s.closeStdin();
    assert.equal(await s.exit, 0);
    assert.equal(total, 100_000);
    assert.ok(sizes.every((n) => n <= 32 * 1024), `sizes ${sizes}`);
    assert.equal(sizes.length, 4);
  });

  test("tty with attachTerminal: size, keystrokes, resize, output, exit", async () => {
    const resizes = [];
    const keys = [];
    srv = await startWSServer({
      onConnect(c) {
        c.onmessage = (ch, payload) => {
          if (ch === 3) resizes.push(JSON.parse(payload.toString()));
          if (ch === 0) {
            keys.push(payload.toString());
            c.send(1, "$ " + payload.toString());
            if (payload.toString() === "exit\r") c.exit({ exit_code: 0 });
          }
        };
      },
    });
    const term = {
      cols: 120,
      rows: 40,
      written: [],
      dataListener: undefined,
      resizeListener: undefined,
      disposed: 0,
      write(d) {
        this.written.push(typeof d === "string" ? d : dec.decode(d));
      },
      onData(f) {
        this.dataListener = f;
        return { dispose: () => this.disposed++ };
      },
      onResize(f) {
        this.resizeListener = f;
        return { dispose: () => this.disposed++ };
      },
    };
    const s = client().instances.execStream("i", { args: ["sh"], tty: true, cols: term.cols, rows: term.rows });
    attachTerminal(term, s);
    await s.opened;
    term.resizeListener({ cols: 80, rows: 24 });
    term.dataListener("ls\r");
    await new Promise((r) => setTimeout(r, 50));
    term.dataListener("exit\r");
    assert.equal(await s.exit, 0);
    await new Promise((r) => setImmediate(r));
    const u = new URL(srv.conns[0].req.url, srv.url);
    assert.equal(u.searchParams.get("tty"), "1");
    assert.equal(u.searchParams.get("cols"), "120");
    assert.equal(u.searchParams.get("rows"), "40");
    assert.deepEqual(resizes, [
      { cols: 120, rows: 40 },
      { cols: 80, rows: 24 },
    ]);
    assert.deepEqual(keys, ["ls\r", "exit\r"]);
    assert.deepEqual(term.written, ["$ ls\r", "$ exit\r", "\r\n[exit 0]\r\n"]);
    assert.equal(term.disposed, 2, "the terminal's listeners are disposed when the command ends");
  });

  test("an exit message with an error rejects with its EnvdError", async () => {
    srv = await startWSServer({
      onConnect(c) {
        c.exit({ exit_code: -1, error: { code: "failed_precondition", message: "instance is Paused, exec needs Running", details: { state: "Paused" } } }, 4409);
      },
    });
    const s = client().instances.execStream("i", { args: ["true"] });
    await assert.rejects(s.exit, (e) => {
      assert.ok(e instanceof FailedPreconditionError);
      assert.equal(e.status, 409);
      assert.equal(e.details.state, "Paused");
      return true;
    });
  });

  test("a close 4xxx without an exit message rejects with the status's error", async () => {
    srv = await startWSServer({ onConnect: (c) => c.close(4404, "no such instance") });
    await assert.rejects(client().instances.execStream("i", { args: ["true"] }).exit, NotFoundError);
  });

  test("a refused handshake is explained by asking the URL without an upgrade", async () => {
    srv = await startWSServer({
      refuse: () => [404, { error: { code: "not_found", message: "instance \"i\" not found" } }],
      onRequest: (req, res) => sendError(res, 404, "not_found", 'instance "i" not found'),
    });
    await assert.rejects(client().instances.execStream("i", { args: ["true"] }).exit, (e) => {
      assert.ok(e instanceof NotFoundError);
      assert.match(e.message, /not found/);
      return true;
    });
  });

  test("a connection that ends without an exit message is an error", async () => {
    srv = await startWSServer({ onConnect: (c) => setTimeout(() => c.socket.destroy(), 20) });
    await assert.rejects(client().instances.execStream("i", { args: ["true"] }).exit, /ended before the exit status/);
  });

  test("aborting ends the session and closes the connection", async () => {
    let closedWith;
    const closed = new Promise((r) => (closedWith = r));
    srv = await startWSServer({ onConnect: (c) => (c.onclose = (code) => closedWith(code)) });
    const ctl = new AbortController();
    const s = client().instances.execStream("i", { args: ["sleep", "1000"], signal: ctl.signal });
    await s.opened;
    ctl.abort();
    await assert.rejects(s.exit, (e) => e.name === "AbortError");
    assert.equal(await closed, 1000);
  });

  test("no command is refused before connecting", () => {
    srv = undefined;
    assert.throws(() => new Client({ url: "http://127.0.0.1:1" }).instances.execStream("i", { args: [] }), /no command/);
  });
});
