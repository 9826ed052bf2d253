// Every operation of docs/openapi.yaml is reached by a method of the SDK.
//
// `routes` below is the one table of "METHOD /path" (as the spec writes it)
// -> the Client method that calls it, with a call of that method. The test
// checks it both ways against the spec (every operation has an entry; every
// entry is an operation of the spec and names a method of the Client), then
// makes each call against a recording server and checks that it sends that
// method to a path of that template. Adding a route to the spec without a
// method here fails this test.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { createServer } from "node:http";
import { after, before, describe, test } from "node:test";

import { Client } from "../../dist/index.js";

const spec = readFileSync(new URL("../../../../docs/openapi.yaml", import.meta.url), "utf8");
// The plain instance verbs (api/types/instance_verbs.json, types.InstanceVerbs).
const instanceVerbs = JSON.parse(readFileSync(new URL("../../../../api/types/instance_verbs.json", import.meta.url), "utf8"));

/** "METHOD /path" of every operation under `paths:` (a line parser: paths at two spaces, methods at four). */
export function specOperations(text) {
  const ops = [];
  let inPaths = false;
  let path;
  for (const line of text.split("\n")) {
    if (/^\S/.test(line)) {
      inPaths = line.startsWith("paths:");
      continue;
    }
    if (!inPaths) continue;
    const p = /^ {2}(\/\S*):\s*$/.exec(line);
    if (p) {
      path = p[1];
      continue;
    }
    const m = /^ {4}(get|put|post|delete|patch|head|options|trace):\s*$/.exec(line);
    if (m && path) ops.push(`${m[1].toUpperCase()} ${path}`);
  }
  return ops;
}

// Operations the SDK deliberately does not wrap, each with its reason.
// Keep it short: a console may only use what the SDKs have.
const excluded = {
  // The web console's page and files (api/console.go), served to browsers, not API calls.
  "GET /": "the web console: a redirect to /console/",
  "GET /console": "the web console: a redirect to /console/",
  "GET /console/": "the web console's page",
  "GET /console/{asset}": "the web console's scripts, stylesheet and icon",
  "GET /favicon.ico": "the web console's icon",
};

const proxyMethods = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];
const ignore = () => {};

/** @type {[string, string, (c: Client) => Promise<unknown>][]} */
const routes = [
  ["GET /healthz", "healthz", (c) => c.healthz()],
  ["GET /readyz", "readyz", (c) => c.readyz()],
  ["GET /metrics", "metrics", (c) => c.metrics()],
  ["POST /mcp", "mcp", (c) => c.mcp({ jsonrpc: "2.0", id: 1, method: "tools/list" })],
  ["GET /v1/info", "info", (c) => c.info()],
  ["POST /v1/images", "images.import", (c) => c.images.import("n", new Uint8Array(1024))],
  ["GET /v1/images", "images.list", (c) => c.images.list()],
  ["POST /v1/projects", "projects.create", (c) => c.projects.create({ name: "p", base: "b" })],
  ["GET /v1/projects", "projects.list", (c) => c.projects.list()],
  ["GET /v1/projects/{p}", "projects.get", (c) => c.projects.get("p")],
  ["DELETE /v1/projects/{p}", "projects.delete", (c) => c.projects.delete("p")],
  ["POST /v1/projects/{p}/instances", "instances.create", (c) => c.instances.create("p")],
  ["GET /v1/projects/{p}/instances", "instances.list", (c) => c.instances.list("p")],
  ["GET /v1/instances", "instances.list", (c) => c.instances.list()],
  ["GET /v1/instances/{i}", "instances.get", (c) => c.instances.get("i")],
  ["DELETE /v1/instances/{i}", "instances.delete", (c) => c.instances.delete("i")],
  // The plain verbs, one entry each, from the server's list: a verb added
  // there is covered by instanceVerb without a line here.
  ...instanceVerbs.map((v) => [`POST /v1/instances/{i}/${v.name}`, "instances.instanceVerb", (c) => c.instances.instanceVerb("i", v.name)]),
  ["POST /v1/instances/{i}/hibernate", "instances.hibernate", (c) => c.instances.hibernate("i", { memory: true })],
  ["POST /v1/instances/{i}/renew", "instances.renew", (c) => c.instances.renew("i", "1h")],
  ["POST /v1/instances/{i}/exec", "instances.exec", (c) => c.instances.exec("i", { args: ["true"] })],
  ["GET /v1/instances/{i}/exec/ws", "instances.execStream", (c) => c.instances.execStream("i", { args: ["true"] }).exit],
  ["POST /v1/instances/{i}/save", "instances.save", (c) => c.instances.save("i")],
  ["POST /v1/instances/{i}/fork", "instances.fork", (c) => c.instances.fork("i")],
  ["POST /v1/projects/{p}/builds", "builds.create", (c) => c.builds.create("p", { manager: "apk", packages: ["curl"] })],
  ["POST /v1/projects/{p}/migrations", "migrations.create", (c) => c.migrations.create("p", { base: "b" })],
  ["GET /v1/projects/{p}/versions", "versions.list", (c) => c.versions.list("p")],
  ["GET /v1/projects/{p}/versions/{n}", "versions.get", (c) => c.versions.get("p", 1)],
  ["GET /v1/instances/{i}/changes", "versions.pending", (c) => c.versions.pending("i")],
  ["GET /v1/projects/{p}/versions/{n}/changes", "versions.changes", (c) => c.versions.changes("p", 2)],
  ["GET /v1/projects/{p}/versions/{n}/export", "versions.export", (c) => c.versions.export("p", 1).then((s) => s.cancel())],
  ["POST /v1/projects/{p}/versions/{n}/pin", "versions.pin", (c) => c.versions.pin("p", 1)],
  ["DELETE /v1/projects/{p}/versions/{n}/pin", "versions.unpin", (c) => c.versions.unpin("p", 1)],
  ["POST /v1/projects/{p}/current", "versions.setCurrent", (c) => c.versions.setCurrent("p", 1, 2)],
  ["PUT /v1/projects/{p}/limits", "projects.setLimits", (c) => c.projects.setLimits("p", {})],
  ["PUT /v1/projects/{p}/retention", "projects.setRetention", (c) => c.projects.setRetention("p", {})],
  ["PUT /v1/projects/{p}/network", "projects.setNetwork", (c) => c.projects.setNetwork("p", { egress: "none" })],
  ["GET /v1/projects/{p}/egress/log", "projects.egressLog", (c) => c.projects.egressLog("p", { limit: 10 })],
  ["GET /v1/secrets", "secrets.list", (c) => c.secrets.list()],
  ["PUT /v1/secrets/{s}", "secrets.set", (c) => c.secrets.set("k", "v")],
  ["PUT /v1/secrets/{s}/binding", "secrets.bind", (c) => c.secrets.bind("k", { host: "api.example.org" })],
  ["DELETE /v1/secrets/{s}", "secrets.delete", (c) => c.secrets.delete("k")],
  ["GET /v1/projects/{p}/volumes", "volumes.list", (c) => c.volumes.list("p")],
  ["POST /v1/projects/{p}/volumes", "volumes.add", (c) => c.volumes.add("p", { spec: "w:/w" })],
  ["DELETE /v1/projects/{p}/volumes/{v}", "volumes.remove", (c) => c.volumes.remove("p", "w")],
  ["POST /v1/projects/{p}/volumes/{v}/archive", "volumes.archive", (c) => c.volumes.archive("p", "w")],
  ["POST /v1/projects/{p}/volumes/{v}/restore", "volumes.restore", (c) => c.volumes.restore("p", "w", { name: "a" })],
  ["GET /v1/projects/{p}/archives", "volumes.archives", (c) => c.volumes.archives("p")],
  ["GET /v1/projects/{p}/volumes/{v}/archives", "volumes.archives", (c) => c.volumes.archives("p", "w")],
  ["DELETE /v1/projects/{p}/volumes/{v}/archives/{name}", "volumes.deleteArchive", (c) => c.volumes.deleteArchive("p", "w", "a")],
  ["POST /v1/admin/gc", "gc", (c) => c.gc()],
  ["GET /v1/operations/{id}", "operations.get", (c) => c.operations.get("op")],
  ["DELETE /v1/operations/{id}", "operations.cancel", (c) => c.operations.cancel("op")],
  ["GET /v1/operations/{id}/events", "operations.events", (c) => c.operations.listEvents("op")],
  ["GET /v1/usage", "usage", (c) => c.usage()],
  ["GET /v1/admin/tenants/{t}/usage", "tenants.usage", (c) => c.tenants.usage("t")],
  ["PUT /v1/admin/tenants/{t}/quota", "tenants.setQuota", (c) => c.tenants.setQuota("t", {})],
  ["POST /v1/admin/tenants/{t}/tokens", "tokens.create", (c) => c.tokens.create("t")],
  ["GET /v1/admin/tenants/{t}/tokens", "tenants.tokens", (c) => c.tenants.tokens("t")],
  ["GET /v1/admin/tokens", "tokens.list", (c) => c.tokens.list()],
  ["DELETE /v1/admin/tokens/{id}", "tokens.revoke", (c) => c.tokens.revoke(1)],
  ["GET /v1/tokens", "tokens.listOwn", (c) => c.tokens.listOwn()],
  ["DELETE /v1/tokens/{id}", "tokens.revokeOwn", (c) => c.tokens.revokeOwn(1)],
  ["POST /v1/admin/rollouts", "rollouts.create", (c) => c.rollouts.create({ from: "a", to: "b" })],
  ["GET /v1/admin/rollouts", "rollouts.list", (c) => c.rollouts.list()],
  ["GET /v1/admin/rollouts/{id}", "rollouts.get", (c) => c.rollouts.get("r")],
  ["POST /v1/admin/rollouts/{id}/pause", "rollouts.pause", (c) => c.rollouts.pause("r")],
  ["POST /v1/admin/rollouts/{id}/resume", "rollouts.resume", (c) => c.rollouts.resume("r")],
  ["POST /v1/admin/rollouts/{id}/cancel", "rollouts.cancel", (c) => c.rollouts.cancel("r")],
  ["POST /v1/admin/rollouts/{id}/rollback", "rollouts.rollback", (c) => c.rollouts.rollback("r")],
  ["PUT /v1/projects/{p}/validation", "projects.setValidation", (c) => c.projects.setValidation("p", { validate: [] })],
  ["PUT /v1/projects/{p}/idle", "projects.setIdle", (c) => c.projects.setIdle("p", {})],
  ["PUT /v1/projects/{p}/runtime-class", "projects.setRuntimeClass", (c) => c.projects.setRuntimeClass("p", "gvisor")],
  ["PUT /v1/projects/{p}/docker", "projects.setDocker", (c) => c.projects.setDocker("p", true)],
  ["PUT /v1/projects/{p}/pool", "projects.setPool", (c) => c.projects.setPool("p", { size: 2 })],
  ["POST /v1/instances/{i}/checkpoint", "checkpoint", (c) => c.checkpoint("i", { message: "m" })],
  ["GET /v1/projects/{p}/checkpoints", "checkpoints", (c) => c.checkpoints("p")],
  ["GET /v1/projects/{p}/checkpoints/{id}", "getCheckpoint", (c) => c.getCheckpoint("p", 3)],
  ["DELETE /v1/projects/{p}/checkpoints/{id}", "deleteCheckpoint", (c) => c.deleteCheckpoint("p", 3)],
  ["GET /v1/projects/{p}/checkpoints/{id}/export", "exportCheckpoint", (c) => c.exportCheckpoint("p", 3).then((s) => s.cancel())],
  ["POST /v1/projects/{p}/checkpoints/import", "importCheckpoint", (c) => c.importCheckpoint("p", new Uint8Array(1024))],
  ["GET /v1/projects/{p}/versions/{n}/spec", "versionSpec", (c) => c.versionSpec("p", 3)],
  ["POST /v1/projects/{p}/build-contexts", "uploadBuildContext", (c) => c.uploadBuildContext("p", new Uint8Array(10))],
  ["GET /v1/operations/{id}/logs", "operationLogs", (c) => c.operationLogs("o")],
  ["GET /v1/nodes", "nodes.list", (c) => c.nodes.list()],
  ["GET /v1/nodes/{name}", "nodes.get", (c) => c.nodes.get("n")],
  ["POST /v1/nodes/{name}/cordon", "nodes.cordon", (c) => c.nodes.cordon("n")],
  ["POST /v1/nodes/{name}/uncordon", "nodes.uncordon", (c) => c.nodes.uncordon("n")],
  ["POST /v1/nodes/{name}/drain", "nodes.drain", (c) => c.nodes.drain("n")],
  ["GET /v1/cluster/join-command", "nodes.joinCommand", (c) => c.nodes.joinCommand()],
  ["POST /v1/cluster/join-tokens", "nodes.createJoinToken", (c) => c.nodes.createJoinToken({ ttl: "10m" })],
  ["POST /v1/cluster/join", "nodes.join", (c) => c.nodes.join({ node: "n" })],
  ["PUT /v1/projects/{p}/checkpoint", "nodes.setCheckpointEvery", (c) => c.nodes.setCheckpointEvery("p", { every: "15m" })],
  ["GET /v1/projects/{p}/checkpoint", "nodes.checkpointEvery", (c) => c.nodes.checkpointEvery("p")],
  ["GET /v1/instances/{i}/ports", "ports.list", (c) => c.ports.list("i")],
  ["POST /v1/ssh-keys", "sshKeys.add", (c) => c.sshKeys.add({ public_key: "ssh-ed25519 AAAA" })],
  ["GET /v1/ssh-keys", "sshKeys.list", (c) => c.sshKeys.list()],
  ["DELETE /v1/ssh-keys/{id}", "sshKeys.remove", (c) => c.sshKeys.remove(1)],
  ["POST /v1/webhooks", "webhooks.create", (c) => c.webhooks.create({ url: "https://hooks.example/h" })],
  ["GET /v1/webhooks", "webhooks.list", (c) => c.webhooks.list()],
  ["DELETE /v1/webhooks/{id}", "webhooks.remove", (c) => c.webhooks.remove("wh_1")],
  ["POST /v1/webhooks/{id}/test", "webhooks.test", (c) => c.webhooks.test("wh_1")],
  ["GET /v1/webhooks/{id}/deliveries", "webhooks.deliveries", (c) => c.webhooks.deliveries("wh_1")],
  ["POST /v1/instances/{i}/ports/{port}/token", "ports.previewUrl", (c) => c.ports.previewUrl("i", 8080)],
  ["GET /v1/instances/{i}/ssh", "instances.ssh", (c) => c.instances.ssh("i").opened],
  ...proxyMethods.map((m) => [`${m} /v1/instances/{i}/ports/{port}`, "ports.fetch", (c) => c.ports.fetch("i", 8080, "", { method: m, redirect: "manual" })]),
  ...proxyMethods.map((m) => [`${m} /v1/instances/{i}/ports/{port}/{path}`, "ports.fetch", (c) => c.ports.fetch("i", 8080, "/a/b?q=1", { method: m })]),
  ["GET /v1/instances/{i}/tcp/{port}", "ports.tunnel", (c) => c.ports.tunnel("i", 8080).opened],
  ["GET /v1/projects/{p}/ports", "ports.publicPorts", (c) => c.ports.publicPorts("p")],
  ["PUT /v1/projects/{p}/ports", "ports.setPublicPorts", (c) => c.ports.setPublicPorts("p", [8080])],
  ["GET /v1/instances/{i}/files", "files.list", (c) => c.files.list("i", "/")],
  ["PUT /v1/instances/{i}/files", "files.write", (c) => c.files.write("i", "/a", "x")],
  ["DELETE /v1/instances/{i}/files", "files.remove", (c) => c.files.remove("i", "/a")],
  ["POST /v1/instances/{i}/files/mkdir", "files.mkdir", (c) => c.files.mkdir("i", "/d")],
  ["POST /v1/instances/{i}/files/move", "files.move", (c) => c.files.move("i", "/a", "/b")],
  ["POST /v1/instances/{i}/files/copy", "files.copy", (c) => c.files.copy("i", "/a", "/b")],
  ["GET /v1/instances/{i}/files/archive", "files.download", (c) => c.files.download("i", "/d").then((s) => s.cancel())],
  ["POST /v1/instances/{i}/files/archive", "files.upload", (c) => c.files.upload("i", "/d", new Uint8Array(1024))],
  [
    "GET /v1/instances/{i}/files/watch",
    "files.watch",
    async (c) => {
      for await (const _ of c.files.watch("i", "/")) break;
    },
  ],
];

/** The regular expression of a spec path template ({path} may hold slashes). */
function templateRE(path) {
  const re = path.replace(/[.*+?^$()|[\]\\]/g, "\\$&").replace(/\{path\}/g, ".*").replace(/\{\w+\}/g, "[^/]+");
  return new RegExp(`^${re}$`);
}

describe("coverage of docs/openapi.yaml", () => {
  const ops = specOperations(spec);
  const table = new Map(routes.map(([op, method]) => [op, method]));

  test("the spec's operations were found", () => {
    assert.ok(ops.length > 80, `${ops.length} operations`);
    assert.ok(ops.includes("GET /v1/instances/{i}/files/watch"));
  });

  test("every operation of the spec has a method (or a listed exclusion)", () => {
    const missing = ops.filter((op) => !table.has(op) && !(op in excluded));
    assert.deepEqual(missing, [], "add these to the table of test/unit/coverage.test.mjs, with the SDK method that calls them");
  });

  test("every entry is an operation of the spec, once, and names a method of the Client", () => {
    const c = new Client({ url: "http://127.0.0.1:1" });
    const problems = [];
    const seen = new Set();
    for (const [op, method] of routes) {
      if (seen.has(op)) problems.push(`${op} is listed twice`);
      seen.add(op);
      if (!ops.includes(op)) problems.push(`${op} is not in docs/openapi.yaml`);
      const parts = method.split(".");
      const owner = parts.slice(0, -1).reduce((o, k) => o?.[k], c);
      const o = owner?.[parts.at(-1)];
      if (typeof o !== "function") problems.push(`${op}: client.${method} is not a method`);
    }
    for (const op of Object.keys(excluded)) {
      if (!ops.includes(op)) problems.push(`excluded ${op} is not in docs/openapi.yaml`);
      if (table.has(op)) problems.push(`excluded ${op} is also in the table`);
    }
    assert.deepEqual(problems, []);
  });

  describe("each call sends its operation", () => {
    let server;
    let url;
    const seen = [];
    before(async () => {
      server = createServer((req, res) => {
        seen.push(`${req.method} ${req.url.split("?")[0]}`);
        req.resume();
        req.on("end", () => {
          res.writeHead(200, { "Content-Type": "application/json" });
          res.end(req.method === "HEAD" ? undefined : "{}");
        });
      });
      // WebSocket routes: the upgrade is recorded and refused.
      server.on("upgrade", (req, sock) => {
        seen.push(`UPGRADE ${req.method} ${req.url.split("?")[0]}`);
        const body = JSON.stringify({ error: { code: "not_found", message: "recorded" } });
        sock.end(`HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`);
      });
      await new Promise((r) => server.listen(0, "127.0.0.1", r));
      url = `http://127.0.0.1:${server.address().port}`;
    });
    after(() => new Promise((r) => (server.closeAllConnections(), server.close(() => r()))));

    for (const [op, method, call] of routes) {
      test(`${op} <- ${method}`, async () => {
        seen.length = 0;
        const c = new Client({ url, token: "t", retries: 0 });
        await call(c).then(ignore, ignore);
        const [verb, path] = op.split(" ");
        const re = templateRE(path);
        const hit = seen.find((s) => {
          const [v, p] = s.replace(/^UPGRADE /, "").split(" ");
          return v === verb && re.test(p);
        });
        assert.ok(hit, `${method} sent ${JSON.stringify(seen)}, not ${op}`);
      });
    }
  });
});
