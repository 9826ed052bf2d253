// Integration tests of files, ports, SSH, rollouts and version export
// against a live envd (ENVD_URL, an admin ENVD_TOKEN, ENVD_IMAGE: a busybox
// base with httpd); they fail, not skip, without them. Project and tenant
// names are fresh per run.
import assert from "node:assert/strict";
import { generateKeyPairSync, randomBytes } from "node:crypto";
import { after, before, describe, test } from "node:test";

import { Client, EnvdError, InvalidArgumentError, NotFoundError, PortUnreachableError } from "../../dist/index.js";

const { ENVD_URL, ENVD_TOKEN, ENVD_IMAGE } = process.env;
const missing = ["ENVD_URL", "ENVD_TOKEN", "ENVD_IMAGE"].filter((k) => !process.env[k]);
if (missing.length > 0) {
  test("environment", () => assert.fail(`set ${missing.join(", ")}: the integration tests need a live envd`));
} else {
  live();
}

const enc = new TextEncoder();
const dec = new TextDecoder();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function bytesOf(stream) {
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  return new Uint8Array(Buffer.concat(chunks));
}

/** Names and contents of a tar's regular entries (ustar, as envd writes it; PAX headers skipped). */
function untar(b) {
  const out = new Map();
  for (let off = 0; off + 512 <= b.length; ) {
    const h = b.subarray(off, off + 512);
    if (h.every((x) => x === 0)) break;
    const str = (o, n) => dec.decode(h.subarray(o, o + n)).replace(/\0.*$/s, "");
    const size = parseInt(str(124, 12).trim() || "0", 8);
    const prefix = str(345, 155);
    const name = (prefix ? prefix + "/" : "") + str(0, 100);
    const type = String.fromCharCode(h[156] || 48);
    if (type === "0" || type === "\0") out.set(name.replace(/^\.\//, ""), b.subarray(off + 512, off + 512 + size));
    else if (type === "5") out.set(name.replace(/^\.\//, ""), null);
    off += 512 + Math.ceil(size / 512) * 512;
  }
  return out;
}

/** A ustar archive of entries (null = a directory). */
function tarOf(entries) {
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
    field(h, 148, 8, h.reduce((a, x) => a + x, 0).toString(8).padStart(6, "0") + "\0 ");
    blocks.push(h, data, new Uint8Array((512 - (data.length % 512)) % 512));
  }
  blocks.push(new Uint8Array(1024));
  return new Uint8Array(Buffer.concat(blocks));
}

/** An ed25519 public key in authorized_keys form. */
function sshPublicKey() {
  const { publicKey } = generateKeyPairSync("ed25519");
  const raw = publicKey.export({ format: "der", type: "spki" }).subarray(-32);
  const str = (b) => {
    const n = Buffer.alloc(4);
    n.writeUInt32BE(b.length);
    return Buffer.concat([n, b]);
  };
  return "ssh-ed25519 " + Buffer.concat([str(Buffer.from("ssh-ed25519")), str(raw)]).toString("base64");
}

function live() {
  const suffix = randomBytes(4).toString("hex");
  const project = `sdkts-par-${suffix}`;
  const c = new Client({ url: ENVD_URL, token: ENVD_TOKEN, timeoutMs: 5 * 60_000 });
  let id;

  before(async () => {
    await c.projects.create({ name: project, base: ENVD_IMAGE });
    id = (await c.instances.create(project, { ttl: "30m" })).id;
  });
  after(async () => {
    if (id) await c.instances.delete(id).catch(() => {});
    await c.projects.delete(project).catch(() => {});
  });

  describe("live envd: files, ports, ssh, export, rollouts", () => {
    test("server: readyz and metrics", async () => {
      assert.equal((await c.readyz()).status, "ready");
      assert.match(await c.metrics(), /^# (HELP|TYPE) /m);
    });

    test("files: write, list, ranged read, mkdir, copy, move, archive out and in, remove", async () => {
      const w = await c.files.write(id, "/srv/sdk/a.txt", "hello world\n", { mkdir: true, mode: "0600" });
      assert.deepEqual([w.path, w.size, w.mode], ["/srv/sdk/a.txt", 12, "0600"]);
      await c.files.mkdir(id, "/srv/sdk/sub/deeper", { parents: true });
      await c.files.copy(id, "/srv/sdk/a.txt", "/srv/sdk/sub/b.txt");
      await c.files.move(id, "/srv/sdk/sub/b.txt", "/srv/sdk/sub/deeper/c.txt");
      const l = await c.files.list(id, "/srv/sdk");
      assert.deepEqual(l.entries.map((e) => [e.name, e.type]).sort(), [["a.txt", "file"], ["sub", "dir"]]);
      const part = await c.files.read(id, "/srv/sdk/a.txt", { offset: 6, length: 5 });
      assert.deepEqual([dec.decode(part.data), part.offset, part.size], ["world", 6, 12]);
      assert.match(part.contentType, /^text\/plain/);
      assert.equal(await c.files.readText(id, "/srv/sdk/sub/deeper/c.txt"), "hello world\n");
      await assert.rejects(c.files.read(id, "/srv/sdk"), InvalidArgumentError);

      const tar = await bytesOf(await c.files.download(id, "/srv/sdk"));
      const names = untar(tar);
      assert.equal(dec.decode(names.get("a.txt")), "hello world\n");
      assert.equal(dec.decode(names.get("sub/deeper/c.txt")), "hello world\n");
      // Elsewhere: into a second instance of the project.
      const other = (await c.instances.create(project, { ttl: "30m" })).id;
      try {
        const up = await c.files.upload(other, "/srv/copy", tar, { mkdir: true });
        assert.ok(up.entries >= 4, `${up.entries} entries`);
        assert.equal(await c.files.readText(other, "/srv/copy/sub/deeper/c.txt"), "hello world\n");
        await c.files.remove(other, "/srv/copy", { recursive: true });
        await assert.rejects(c.files.list(other, "/srv/copy"), NotFoundError);
      } finally {
        await c.instances.delete(other).catch(() => {});
      }
      await c.files.upload(id, "/srv/copy", new Blob([tar]), { mkdir: true });
      assert.equal(await c.files.readText(id, "/srv/copy/a.txt"), "hello world\n");
      const zst = await bytesOf(await c.files.download(id, "/srv/sdk", { format: "tar.zst" }));
      assert.deepEqual([...zst.subarray(0, 4)], [0x28, 0xb5, 0x2f, 0xfd], "a zstd frame");

      await c.files.remove(id, "/srv/copy", { recursive: true });
      await assert.rejects(c.files.list(id, "/srv/copy"), NotFoundError);
    });

    test("files: watch sees a file made", async () => {
      await c.files.mkdir(id, "/srv/watched", { parents: true });
      const ac = new AbortController();
      const seen = [];
      // The stream commits after the watch is set up (about 200 ms); the
      // atomic write shows as its temporary file's events, then the rename.
      const watching = (async () => {
        for await (const ev of c.files.watch(id, "/srv/watched", { signal: ac.signal })) {
          seen.push(ev);
          if (ev.path === "/srv/watched/new.txt") return ev;
        }
      })();
      await sleep(600);
      await c.files.write(id, "/srv/watched/new.txt", "x");
      const ev = await Promise.race([watching, sleep(20_000).then(() => "timeout")]);
      ac.abort();
      await watching.catch(() => {});
      assert.notEqual(ev, "timeout", `no event for new.txt within 20 s: ${JSON.stringify(seen)}`);
      assert.ok(["create", "move"].includes(ev.type), JSON.stringify(seen));
    });

    test("ports: list, fetch through the proxy, preview token, public ports, tunnel", async () => {
      await c.instances.exec(id, { args: ["sh", "-c", "mkdir -p /www && echo hi-from-httpd > /www/index.html && httpd -p 127.0.0.1:8080 -h /www"] });
      let ports = [];
      for (let i = 0; i < 100 && !ports.some((p) => p.port === 8080); i++) {
        ports = await c.ports.list(id);
        if (!ports.some((p) => p.port === 8080)) await sleep(200);
      }
      assert.ok(ports.some((p) => p.port === 8080 && p.protocol.startsWith("tcp")), JSON.stringify(ports));

      const res = await c.ports.fetch(id, 8080, "/index.html");
      assert.equal(res.status, 200);
      assert.equal(await res.text(), "hi-from-httpd\n");
      const missingPage = await c.ports.fetch(id, 8080, "/nope.html");
      assert.equal(missingPage.status, 404);
      await missingPage.body?.cancel();
      const nobody = await c.ports.fetch(id, 8099, "/");
      assert.equal(nobody.status, 502);
      assert.equal((await nobody.json()).error.code, "port_unreachable");

      const tok = await c.ports.previewUrl(id, 8080, { ttl: "10m" });
      assert.ok(tok.token.length > 10);
      assert.ok(Date.parse(tok.expires_at) > Date.now());
      assert.deepEqual((await c.ports.setPublicPorts(project, [8080])).public, [8080]);
      assert.deepEqual((await c.ports.publicPorts(project)).public, [8080]);
      assert.deepEqual((await c.ports.setPublicPorts(project, [])).public, []);

      const t = c.ports.tunnel(id, 8080);
      await t.opened;
      t.write("GET /index.html HTTP/1.0\r\nHost: x\r\n\r\n");
      t.closeWrite();
      const answer = dec.decode(await bytesOf(t.readable));
      assert.match(answer, /^HTTP\/1\.[01] 200/);
      assert.match(answer, /hi-from-httpd/);
      t.close();
      await assert.rejects(c.ports.tunnel(id, 8099).opened, PortUnreachableError);
    });

    test("ssh keys: add, list, remove; the SSH stream answers with a banner", async () => {
      const key = await c.sshKeys.add({ public_key: sshPublicKey(), name: `sdk-${suffix}` });
      assert.match(key.fingerprint, /^SHA256:/);
      assert.ok((await c.sshKeys.list()).some((k) => k.id === key.id && k.name === `sdk-${suffix}`));
      assert.equal((await c.sshKeys.remove(key.id)).id, key.id);
      assert.ok(!(await c.sshKeys.list()).some((k) => k.id === key.id));
      await assert.rejects(c.sshKeys.add({ public_key: "not a key" }), InvalidArgumentError);

      const s = c.instances.ssh(id);
      const reader = s.readable.getReader();
      let banner = "";
      while (!banner.includes("\n")) {
        const r = await reader.read();
        assert.ok(!r.done, "the stream ended before the banner");
        banner += dec.decode(r.value);
      }
      assert.match(banner, /^SSH-2\.0-/);
      s.close();
      await assert.rejects(c.instances.ssh(`${id}-missing`).opened, NotFoundError);
    });

    test("versions: export is an OCI layout that imports as an image; validation", async () => {
      const tar = await bytesOf(await c.versions.export(project, 1));
      const names = untar(tar);
      assert.ok(names.has("oci-layout"), [...names.keys()].join(" "));
      assert.ok(names.has("index.json"));
      assert.equal(JSON.parse(dec.decode(names.get("oci-layout"))).imageLayoutVersion, "1.0.0");
      assert.ok([...names.keys()].some((n) => n.startsWith("blobs/sha256/")));
      const img = await c.images.import(`sdkts-oci-${suffix}`, tar);
      assert.match(img.digest, /^sha256:/);
      await assert.rejects(c.images.pull(`sdkts-pull-${suffix}`, "NOT A REFERENCE::"), InvalidArgumentError);

      const p = await c.projects.setValidation(project, { validate: [["true"], ["sh", "-c", "test -d /etc"]] });
      assert.deepEqual(p.validate, [["true"], ["sh", "-c", "test -d /etc"]]);
      assert.deepEqual((await c.projects.validation(project)).validate, p.validate);
      await assert.rejects(c.projects.setValidation(project, { validate: [[]] }), InvalidArgumentError);
      await c.projects.setValidation(project, { validate: [] });
    });

    test("rollouts: a dry run selected by name, listed, read, and not pausable once done", async () => {
      const from = `sdkts-ro-a-${suffix}`;
      const to = `sdkts-ro-b-${suffix}`;
      await c.images.import(from, tarOf({ "etc/": null, "etc/base": "a\n" }));
      await c.images.import(to, tarOf({ "etc/": null, "etc/base": "b\n" }));
      const rp = `sdkts-ro-${suffix}`;
      await c.projects.create({ name: rp, base: from });
      try {
        const tenant = (await c.usage()).tenant;
        const ro = await c.rollouts.create({ from, to, tenant, selector: rp, dry_run: true });
        assert.equal(ro.dry_run, true);
        assert.ok(ro.id && ro.operation_id);
        assert.ok((await c.rollouts.list()).some((r) => r.id === ro.id));
        let got = await c.rollouts.get(ro.id);
        for (let i = 0; i < 600 && got.state === "running"; i++) {
          await sleep(200);
          got = await c.rollouts.get(ro.id);
        }
        assert.equal(got.state, "succeeded", got.message);
        assert.deepEqual(got.projects.map((p) => [p.project, p.status]), [[rp, "clean"]]);
        await assert.rejects(c.rollouts.pause(ro.id), (e) => e instanceof EnvdError && e.status === 409);
        await assert.rejects(c.rollouts.get("ro-missing"), (e) => e instanceof EnvdError && e.status >= 400);
      } finally {
        await c.projects.delete(rp).catch(() => {});
      }
    });
  });
}
