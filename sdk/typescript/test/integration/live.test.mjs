// Integration tests against a live envd: ENVD_URL, ENVD_TOKEN (an admin
// token) and ENVD_IMAGE (an imported base image with busybox) must be set;
// the tests fail, not skip, without them. ENVD_PROJECT names the project
// (default: a random name). e2e/sdk_typescript_test.go runs them against the
// e2e package's node.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, describe, test } from "node:test";

import {
  AlreadyExistsError,
  attachTerminal,
  Client,
  ConflictError,
  EnvdError,
  FailedPreconditionError,
  NotFoundError,
  UnauthenticatedError,
} from "../../dist/index.js";

const { ENVD_URL, ENVD_TOKEN, ENVD_IMAGE } = process.env;
const missing = ["ENVD_URL", "ENVD_TOKEN", "ENVD_IMAGE"].filter((k) => !process.env[k]);

if (missing.length > 0) {
  test("environment", () => {
    assert.fail(`set ${missing.join(", ")}: the integration tests need a live envd (ENVD_URL, an admin ENVD_TOKEN, a base image ENVD_IMAGE)`);
  });
} else {
  live();
}

const dec = new TextDecoder();

/** A ustar archive of entries (a null value is a directory), written by hand. */
function tarOf(entries) {
  const enc = new TextEncoder();
  const blocks = [];
  const field = (h, off, len, v) => h.set(enc.encode(v).subarray(0, len), off);
  const octal = (n, len) => n.toString(8).padStart(len - 1, "0") + "\0";
  for (const [name, content] of Object.entries(entries)) {
    const data = content === null ? new Uint8Array(0) : enc.encode(content);
    const h = new Uint8Array(512);
    field(h, 0, 100, name);
    field(h, 100, 8, octal(content === null ? 0o755 : 0o644, 8));
    field(h, 108, 8, octal(0, 8));
    field(h, 116, 8, octal(0, 8));
    field(h, 124, 12, octal(data.length, 12));
    field(h, 136, 12, octal(Math.floor(Date.now() / 1000), 12));
    field(h, 148, 8, "        ");
    field(h, 156, 1, content === null ? "5" : "0");
    field(h, 257, 6, "ustar\0");
    field(h, 263, 2, "00");
    const sum = h.reduce((a, b) => a + b, 0);
    field(h, 148, 8, sum.toString(8).padStart(6, "0") + "\0 ");
    blocks.push(h, data, new Uint8Array((512 - (data.length % 512)) % 512));
  }
  blocks.push(new Uint8Array(1024));
  const out = new Uint8Array(blocks.reduce((a, b) => a + b.length, 0));
  let off = 0;
  for (const b of blocks) {
    out.set(b, off);
    off += b.length;
  }
  return out;
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function live() {
  const suffix = randomBytes(4).toString("hex");
  const project = process.env.ENVD_PROJECT || `sdkts-${suffix}`;
  const c = new Client({ url: ENVD_URL, token: ENVD_TOKEN, timeoutMs: 5 * 60_000 });
  const made = []; // instances to delete at the end
  const s = {}; // state shared by the tests, in order

  after(async () => {
    for (const id of made) await c.instances.delete(id).catch(() => {});
    await c.projects.delete(project).catch(() => {});
  });

  describe("live envd", () => {
    test("info and images", async () => {
      const info = await c.info();
      assert.ok(info.version, "info.version");
      assert.ok(info.node, "info.node");
      assert.deepEqual(await c.healthz(), { status: "ok" });
      const images = await c.images.list();
      assert.ok(images.some((i) => i.name === ENVD_IMAGE), `image ${ENVD_IMAGE} in ${images.map((i) => i.name)}`);
    });

    test("projects: create is idempotent with a key; typed errors", async () => {
      const key = `create-${project}`;
      const p = await c.projects.create({ name: project, base: ENVD_IMAGE }, { idempotencyKey: key });
      assert.equal(p.name, project);
      assert.equal(p.current_version, 1);
      const again = await c.projects.create({ name: project, base: ENVD_IMAGE }, { idempotencyKey: key });
      assert.equal(again.created_at, p.created_at, "a retry with the key answers the same project");
      await assert.rejects(c.projects.create({ name: project, base: ENVD_IMAGE }), AlreadyExistsError);
      await assert.rejects(c.projects.get(`${project}-missing`), (e) => e instanceof NotFoundError && e.status === 404);
      assert.ok((await c.projects.list()).some((x) => x.name === project));
      assert.equal((await c.projects.get(project)).base_image.length > 0, true);
    });

    test("instances: create (waits for Running) and buffered exec", async () => {
      const i = await c.instances.create(project, { ttl: "30m" });
      made.push(i.id);
      s.first = i;
      assert.equal(i.state, "Running");
      assert.equal(i.version, 1);
      const r = await c.instances.exec(i.id, { args: ["sh", "-c", "echo hi; echo err >&2; exit 3"] });
      assert.deepEqual([r.exit_code, r.stdout, r.stderr], [3, "hi\n", "err\n"]);
      const withStdin = await c.instances.exec(i.id, { args: ["cat"], stdin: "from stdin" });
      assert.equal(withStdin.stdout, "from stdin");
      assert.equal((await c.instances.get(i.id)).id, i.id);
      assert.ok((await c.instances.list(project)).some((x) => x.id === i.id));
    });

    test("exec stream: stdin, stdout, stderr, exit code", async () => {
      let out = "";
      let err = "";
      const sess = c.instances.execStream(s.first.id, {
        args: ["sh", "-c", "cat; echo oops >&2; exit 5"],
        onStdout: (b) => (out += dec.decode(b)),
        onStderr: (b) => (err += dec.decode(b)),
      });
      sess.write("streamed\n");
      sess.closeStdin();
      assert.equal(await sess.exit, 5);
      assert.equal(out, "streamed\n");
      assert.equal(err, "oops\n");
    });

    test("exec stream with a tty and attachTerminal", async () => {
      let sized = "";
      const sz = c.instances.execStream(s.first.id, { args: ["stty", "size"], tty: true, cols: 100, rows: 30, onStdout: (b) => (sized += dec.decode(b)) });
      assert.equal(await sz.exit, 0);
      assert.equal(sized.trim(), "30 100");

      const term = {
        cols: 90,
        rows: 20,
        out: "",
        write(d) {
          this.out += typeof d === "string" ? d : dec.decode(d);
        },
        onData(f) {
          this.data = f;
        },
        onResize(f) {
          this.resize = f;
        },
      };
      const sess = c.instances.execStream(s.first.id, { args: ["sh"], tty: true, cols: term.cols, rows: term.rows });
      attachTerminal(term, sess);
      await sess.opened;
      term.resize({ cols: 77, rows: 22 });
      // A resize is asynchronous, like SIGWINCH: ask until the new size shows.
      for (let i = 0; i < 100 && !term.out.includes("22 77"); i++) {
        term.data("stty size\r");
        await sleep(100);
      }
      term.data("echo $((6*7))\r");
      for (let i = 0; i < 100 && !term.out.includes("42"); i++) await sleep(50);
      assert.match(term.out, /22 77/);
      assert.match(term.out, /42/);
      term.data("exit\r");
      assert.equal(await sess.exit, 0);
      await sleep(10);
      assert.match(term.out, /\[exit 0\]/);
    });

    test("save with an Idempotency-Key, events, wait", async () => {
      await c.instances.exec(s.first.id, { args: ["sh", "-c", "echo saved > /fixtures/modify-me"] });
      const key = `save-${suffix}`;
      const op = await c.instances.save(s.first.id, { message: "from the sdk" }, { idempotencyKey: key });
      assert.equal(op.kind, "save");
      const again = await c.instances.save(s.first.id, { message: "from the sdk" }, { idempotencyKey: key });
      assert.equal(again.id, op.id, "a retry with the key answers the same operation");
      const seen = [];
      for await (const ev of c.operations.events(op.id)) seen.push(ev.seq);
      assert.ok(seen.length > 0);
      assert.deepEqual(seen, seen.map((_, i) => i + 1), "events 1..n in order");
      const done = await c.operations.wait(op.id);
      assert.equal(done.state, "succeeded");
      assert.equal(done.result.version, 2);
      assert.equal(done.result.current, true);
      assert.equal(done.result.conflict, false);
      const res = await c.operations.result(op.id);
      assert.equal(res.version, 2);
      s.saveOp = op.id;
      s.saveEvents = seen.length;
    });

    test("events stream resumes after a dropped connection (live server)", async () => {
      // A fetch that cuts the first event stream right after its first event.
      const requests = [];
      let cut = false;
      const cuttingFetch = async (url, init) => {
        const res = await fetch(url, init);
        requests.push(new Headers(init?.headers).get("Last-Event-ID"));
        if (cut || !String(url).includes("/events") || !res.body) return res;
        cut = true;
        const reader = res.body.getReader();
        let buf = "";
        const body = new ReadableStream({
          async pull(ctl) {
            const r = await reader.read();
            if (r.done) return ctl.close();
            buf += dec.decode(r.value, { stream: true });
            const at = buf.indexOf("\n\n");
            if (at >= 0) {
              ctl.enqueue(new TextEncoder().encode(buf.slice(0, at + 2)));
              await reader.cancel();
              ctl.error(new TypeError("terminated: the test dropped the connection"));
              return;
            }
          },
        });
        return new Response(body, { status: res.status, headers: res.headers });
      };
      const dc = new Client({ url: ENVD_URL, token: ENVD_TOKEN, fetch: cuttingFetch, pollIntervalMs: 50 });
      const seen = [];
      const reconnects = [];
      const op = await dc.operations.wait(s.saveOp, { onEvent: (e) => seen.push(e.seq), onReconnect: (last) => reconnects.push(last) });
      assert.equal(op.state, "succeeded");
      assert.deepEqual(reconnects, [1]);
      assert.deepEqual(requests, [null, "1"], "the second stream starts after the last event seen");
      assert.deepEqual(seen, Array.from({ length: s.saveEvents }, (_, i) => i + 1), "no gap, no repeat");
      assert.deepEqual((await c.operations.listEvents(s.saveOp, 0)).map((e) => e.seq), seen);
    });

    test("versions: list, get, roll back by compare-and-swap, pin", async () => {
      const vs = await c.versions.list(project);
      assert.deepEqual(vs.map((v) => v.version).sort(), [1, 2]);
      const v2 = await c.versions.get(project, 2);
      assert.equal(v2.current, true);
      assert.equal(v2.message, "from the sdk");
      const p = await c.versions.setCurrent(project, 1, 2);
      assert.equal(p.current_version, 1);
      await assert.rejects(c.versions.setCurrent(project, 2, 2), (e) => e instanceof ConflictError && e.status === 409);
      assert.equal((await c.versions.pin(project, 2)).pinned, true);
      assert.equal((await c.versions.unpin(project, 2)).pinned, false);
      const ch = await c.versions.changes(project, 2);
      assert.equal(ch.against, 1, "against the parent");
      assert.ok(ch.totals.added + ch.totals.modified + ch.totals.deleted > 0, "the save changed something");
      const back = await c.versions.changes(project, 1, { against: 2, limit: 3 });
      assert.equal(back.against, 2);
    });

    test("instances: up (async restore operation) starts from the rolled-back version", async () => {
      const events = [];
      const i = await c.instances.up(project, { ttl: "30m" }, { onEvent: (e) => events.push(e.type) });
      made.push(i.id);
      assert.equal(i.state, "Running");
      assert.equal(i.version, 1);
      const r = await c.instances.exec(i.id, { args: ["cat", "/fixtures/modify-me"] });
      assert.equal(r.stdout, "base content\n");
      const op = await c.instances.createAsync(project, { ttl: "30m", retain: true });
      assert.equal(op.kind, "restore");
      made.push(op.target);
      const retained = await c.operations.result(op.id);
      assert.equal(retained.id, op.target);
      assert.equal(retained.retain, true);
      s.retained = retained;
    });

    test("lifecycle: pause, resume, renew, stop, start, hibernate, delete", async () => {
      const id = s.retained.id;
      assert.equal((await c.instances.pause(id)).state, "Paused");
      await assert.rejects(c.instances.exec(id, { args: ["true"] }), (e) => e instanceof FailedPreconditionError && e.details?.state === "Paused");
      assert.equal((await c.instances.resume(id)).state, "Running");
      const renewed = await c.instances.renew(id, "2h");
      assert.ok(Date.parse(renewed.expires_at) > Date.now() + 90 * 60_000);
      assert.equal((await c.instances.stop(id)).state, "Stopped");
      const started = await c.instances.start(id);
      assert.equal(started.state, "Running");
      assert.equal(started.generation, s.retained.generation + 1);
      await c.instances.stop(id);
      const hib = await c.instances.hibernate(id);
      assert.equal(hib.state, "Stopped");
      assert.equal(hib.reason, "hibernated");
      assert.ok(hib.hibernated_version > 0);
      const del = await c.instances.delete(id);
      assert.equal(del.state, "Terminated");
    });

    test("project settings: retention, limits, network, volumes", async () => {
      assert.equal((await c.projects.setRetention(project, { keep_last: 5 })).retention.keep_last, 5);
      assert.equal((await c.projects.setLimits(project, { pids: 500 })).limits.pids, 500);
      const n = await c.projects.setNetwork(project, { egress: "none", isolate_instances: true });
      assert.deepEqual([n.egress, n.isolate_instances], ["none", true]);
      const withVol = await c.volumes.add(project, { spec: "work:/work" });
      assert.ok(withVol.volumes.some((v) => v.name === "work" && v.path === "/work"));
      assert.ok((await c.volumes.list(project)).some((v) => v.name === "work"));
      assert.deepEqual(await c.volumes.archives(project), []);
    });

    test("tokens, quota and usage of another tenant", async () => {
      const tenant = `sdkts-${suffix}`;
      const tok = await c.tokens.create(tenant, { expires_in: "1h" });
      assert.equal(tok.tenant, tenant);
      assert.ok(tok.token);
      const tc = new Client({ url: ENVD_URL, token: tok.token });
      assert.deepEqual(await tc.projects.list(), [], "a tenant sees only its own projects");
      assert.equal((await tc.usage()).tenant, tenant);
      const q = await c.tenants.setQuota(tenant, { max_instances: 1, max_ttl: "2h" });
      assert.equal(q.max_instances, 1);
      assert.equal((await c.tenants.usage(tenant)).quota.max_instances, 1);
      assert.ok((await c.tokens.list(tenant)).some((t) => t.id === tok.id));
      assert.ok((await tc.tokens.listOwn()).some((t) => t.id === tok.id));
      const revoked = await c.tokens.revoke(tok.id);
      assert.ok(revoked.revoked_at);
      await assert.rejects(tc.info(), UnauthenticatedError);
    });

    test("gc (dry run), build and migration operations", async (t) => {
      const gc = await c.operations.result((await c.gc({ dry_run: true })).id);
      assert.equal(gc.dry_run, true);

      // The fixture base is busybox without a package manager: the build
      // operation runs and fails, and result() throws its error.
      const b = await c.builds.create(project, { manager: "apk", packages: ["curl"] });
      assert.equal(b.kind, "build");
      const bdone = await c.operations.wait(b.id);
      t.diagnostic(`build on busybox: ${JSON.stringify(bdone.error)}`);
      assert.equal(bdone.state, "failed");
      assert.ok(bdone.error?.code && bdone.error.message, "a failed operation has a code and a message");
      await assert.rejects(c.operations.result(b.id), (e) => {
        assert.ok(e instanceof EnvdError);
        assert.equal(e.code, bdone.error.code);
        assert.equal(e.message, bdone.error.message);
        return true;
      });

      // A second base, made here: a tar written by hand, imported as a
      // gzip stream (the SDK tells gzip by its first bytes).
      const gz = new Blob([tarOf({ "etc/": null, "etc/sdk-base": "second base\n" })]).stream().pipeThrough(new CompressionStream("gzip"));
      const base2 = await c.images.import(`sdkts-${suffix}-b`, gz);
      assert.equal(base2.name, `sdkts-${suffix}-b`);
      assert.match(base2.digest, /^sha256:/);
      const plain = await c.images.import(`sdkts-${suffix}-p`, tarOf({ "etc/": null, "etc/plain": "x\n" }));
      assert.notEqual(plain.digest, base2.digest);
      assert.ok((await c.images.list()).some((i) => i.name === plain.name && i.digest === plain.digest));

      const m = await c.migrations.create(project, { base: base2.name });
      assert.equal(m.kind, "migrate");
      const mres = await c.operations.result(m.id);
      assert.equal(mres.project, project);
      assert.equal(mres.from, 1);
      assert.ok(mres.version > 2);
      assert.ok(mres.new_base.includes(base2.digest), `${mres.new_base} is the new base`);
      assert.equal((await c.versions.get(project, mres.version)).kind, "migration");
    });
  });
}
