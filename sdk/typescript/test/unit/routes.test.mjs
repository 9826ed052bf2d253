// Every SDK call sends the method, path, query, headers and body of its
// route in docs/api.md (a recording node:http server answers {}).
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { Client } from "../../dist/index.js";
import { sendJSON, startHTTPServer } from "../helpers/httpserver.mjs";

describe("routes", () => {
  let srv;
  let c;
  before(async () => {
    srv = await startHTTPServer((req, res) => {
      if (req.method === "DELETE" && req.url === "/v1/projects/p") return res.writeHead(204).end();
      sendJSON(res, 200, {});
    });
    c = new Client({ url: srv.url + "/", token: "t" });
  });
  after(() => srv.close());

  const K = "Idempotency-Key";
  const cases = [
    ["info", () => c.info(), "GET", "/v1/info"],
    ["healthz", () => c.healthz(), "GET", "/healthz"],
    ["usage", () => c.usage(), "GET", "/v1/usage"],
    ["gc", () => c.gc({ dry_run: true }), "POST", "/v1/admin/gc", { dry_run: true }, [K]],
    ["images.list", () => c.images.list(), "GET", "/v1/images"],
    ["projects.create", () => c.projects.create({ name: "p", base: "b", volumes: ["w:/w"] }), "POST", "/v1/projects", { name: "p", base: "b", volumes: ["w:/w"] }, [K]],
    ["projects.list", () => c.projects.list(), "GET", "/v1/projects"],
    ["projects.get escapes", () => c.projects.get("a/b c"), "GET", "/v1/projects/a%2Fb%20c"],
    ["projects.delete", () => c.projects.delete("p"), "DELETE", "/v1/projects/p"],
    ["projects.setRetention", () => c.projects.setRetention("p", { keep_last: 3 }), "PUT", "/v1/projects/p/retention", { keep_last: 3 }],
    ["projects.setLimits", () => c.projects.setLimits("p", { memory_bytes: 1 }), "PUT", "/v1/projects/p/limits", { memory_bytes: 1 }],
    ["projects.setNetwork", () => c.projects.setNetwork("p", { egress: "none" }), "PUT", "/v1/projects/p/network", { egress: "none" }],
    ["projects.setIdle", () => c.projects.setIdle("p", { after: "30m", action: "stop" }), "PUT", "/v1/projects/p/idle", { after: "30m", action: "stop" }],
    ["instances.create", () => c.instances.create("p", { ttl: "1h" }), "POST", "/v1/projects/p/instances", { ttl: "1h" }, [K]],
    ["instances.createAsync", () => c.instances.createAsync("p", { retain: true }), "POST", "/v1/projects/p/instances", { retain: true }, [K, "Prefer=respond-async"]],
    ["instances.list of a project", () => c.instances.list("p"), "GET", "/v1/projects/p/instances"],
    ["instances.list of all", () => c.instances.list(), "GET", "/v1/instances"],
    ["instances.get", () => c.instances.get("i"), "GET", "/v1/instances/i"],
    ["instances.delete", () => c.instances.delete("i"), "DELETE", "/v1/instances/i"],
    ["instances.stop", () => c.instances.stop("i"), "POST", "/v1/instances/i/stop"],
    ["instances.start", () => c.instances.start("i"), "POST", "/v1/instances/i/start"],
    ["instances.pause", () => c.instances.pause("i"), "POST", "/v1/instances/i/pause"],
    ["instances.resume", () => c.instances.resume("i"), "POST", "/v1/instances/i/resume"],
    ["instances.renew", () => c.instances.renew("i", "none"), "POST", "/v1/instances/i/renew", { ttl: "none" }],
    ["instances.hibernate", () => c.instances.hibernate("i"), "POST", "/v1/instances/i/hibernate"],
    ["instances.hibernate with memory", () => c.instances.hibernate("i", { memory: true }), "POST", "/v1/instances/i/hibernate", { memory: true }],
    ["instances.exec", () => c.instances.exec("i", { args: ["ls"], generation: 2 }), "POST", "/v1/instances/i/exec", { args: ["ls"], generation: 2 }],
    ["instances.save", () => c.instances.save("i", { expected_current: 0 }), "POST", "/v1/instances/i/save", { expected_current: 0 }, [K]],
    ["instances.fork", () => c.instances.fork("i", { message: "b", retain: true }), "POST", "/v1/instances/i/fork", { message: "b", retain: true }, [K]],
    ["instances.fork with memory", () => c.instances.fork("i", { memory: true, count: 4 }), "POST", "/v1/instances/i/fork", { memory: true, count: 4 }, [K]],
    ["versions.list", () => c.versions.list("p"), "GET", "/v1/projects/p/versions"],
    ["versions.listPage", () => c.versions.listPage("p", { limit: 5, pageToken: "t" }), "GET", "/v1/projects/p/versions?limit=5&page_token=t"],
    ["instances.listPage of all", () => c.instances.listPage(undefined), "GET", "/v1/instances?limit=100"],
    ["versions.get", () => c.versions.get("p", 3), "GET", "/v1/projects/p/versions/3"],
    ["versions.setCurrent", () => c.versions.setCurrent("p", 2, 0), "POST", "/v1/projects/p/current", { version: 2, expected_current: 0 }],
    ["versions.pin", () => c.versions.pin("p", 3), "POST", "/v1/projects/p/versions/3/pin"],
    ["versions.unpin", () => c.versions.unpin("p", 3), "DELETE", "/v1/projects/p/versions/3/pin"],
    ["versions.changes", () => c.versions.changes("p", 3), "GET", "/v1/projects/p/versions/3/changes"],
    ["versions.changes against", () => c.versions.changes("p", 3, { against: 1, limit: 5 }), "GET", "/v1/projects/p/versions/3/changes?against=1&limit=5"],
    ["versions.pending", () => c.versions.pending("i", { limit: 2 }), "GET", "/v1/instances/i/changes?limit=2"],
    ["builds.create", () => c.builds.create("p", { manager: "apt", packages: ["tree"] }), "POST", "/v1/projects/p/builds", { manager: "apt", packages: ["tree"] }, [K]],
    ["migrations.create", () => c.migrations.create("p", { base: "b2", switch: true }), "POST", "/v1/projects/p/migrations", { base: "b2", switch: true }, [K]],
    ["migrations.create rebuild", () => c.migrations.create("p", { base: "b2", mode: "rebuild" }), "POST", "/v1/projects/p/migrations", { base: "b2", mode: "rebuild" }, [K]],
    ["versionSpec", () => c.versionSpec("p", 3), "GET", "/v1/projects/p/versions/3/spec"],
    ["operationLogs", () => c.operationLogs("op-1"), "GET", "/v1/operations/op-1/logs"],
    ["volumes.list", () => c.volumes.list("p"), "GET", "/v1/projects/p/volumes"],
    ["volumes.add", () => c.volumes.add("p", { spec: "w:/w" }), "POST", "/v1/projects/p/volumes", { spec: "w:/w" }],
    ["volumes.remove", () => c.volumes.remove("p", "w"), "DELETE", "/v1/projects/p/volumes/w"],
    ["volumes.archive", () => c.volumes.archive("p", "w", { name: "n1" }), "POST", "/v1/projects/p/volumes/w/archive", { name: "n1" }],
    ["volumes.restore", () => c.volumes.restore("p", "w", { name: "n1" }), "POST", "/v1/projects/p/volumes/w/restore", { name: "n1" }],
    ["volumes.archives of a project", () => c.volumes.archives("p"), "GET", "/v1/projects/p/archives"],
    ["volumes.archives of a volume", () => c.volumes.archives("p", "w"), "GET", "/v1/projects/p/volumes/w/archives"],
    ["volumes.deleteArchive", () => c.volumes.deleteArchive("p", "w", "n1"), "DELETE", "/v1/projects/p/volumes/w/archives/n1"],
    ["tokens.create", () => c.tokens.create("acme", { expires_in: "1h" }), "POST", "/v1/admin/tenants/acme/tokens", { expires_in: "1h" }],
    ["tokens.list", () => c.tokens.list(), "GET", "/v1/admin/tokens"],
    ["tokens.list of a tenant", () => c.tokens.list("acme"), "GET", "/v1/admin/tokens?tenant=acme"],
    ["tokens.listOwn", () => c.tokens.listOwn(), "GET", "/v1/tokens"],
    ["tokens.revoke", () => c.tokens.revoke(7), "DELETE", "/v1/admin/tokens/7"],
    ["tokens.revokeOwn", () => c.tokens.revokeOwn(7), "DELETE", "/v1/tokens/7"],
    ["tenants.setQuota", () => c.tenants.setQuota("acme", { max_instances: 2 }), "PUT", "/v1/admin/tenants/acme/quota", { max_instances: 2 }],
    ["tenants.usage", () => c.tenants.usage("acme"), "GET", "/v1/admin/tenants/acme/usage"],
    ["tenants.tokens", () => c.tenants.tokens("acme"), "GET", "/v1/admin/tenants/acme/tokens"],
    ["operations.get", () => c.operations.get("op-1"), "GET", "/v1/operations/op-1"],
    ["operations.cancel", () => c.operations.cancel("op-1"), "DELETE", "/v1/operations/op-1"],
    ["operations.listEvents", () => c.operations.listEvents("op-1", 4), "GET", "/v1/operations/op-1/events?after=4&wait=false"],
    ["checkpoint", () => c.checkpoint("i", { message: "m", set_current: true }), "POST", "/v1/instances/i/checkpoint", { message: "m", set_current: true }, [K]],
    ["checkpoints", () => c.checkpoints("p"), "GET", "/v1/projects/p/checkpoints"],
    ["getCheckpoint", () => c.getCheckpoint("p", 2), "GET", "/v1/projects/p/checkpoints/2"],
    ["deleteCheckpoint", () => c.deleteCheckpoint("p", 2), "DELETE", "/v1/projects/p/checkpoints/2"],
    ["instances.create from a checkpoint", () => c.instances.create("p", { checkpoint: 2 }), "POST", "/v1/projects/p/instances", { checkpoint: 2 }, [K]],
    ["volumes.restore to a checkpoint", () => c.volumes.restore("p", "w", { checkpoint: 2 }), "POST", "/v1/projects/p/volumes/w/restore", { checkpoint: 2 }],
    ["nodes.list", () => c.nodes.list(), "GET", "/v1/nodes"],
    ["nodes.get", () => c.nodes.get("n 1"), "GET", "/v1/nodes/n%201"],
    ["nodes.cordon", () => c.nodes.cordon("n1"), "POST", "/v1/nodes/n1/cordon"],
    ["nodes.uncordon", () => c.nodes.uncordon("n1"), "POST", "/v1/nodes/n1/uncordon"],
    ["nodes.drain", () => c.nodes.drain("n1"), "POST", "/v1/nodes/n1/drain"],
    ["nodes.joinCommand", () => c.nodes.joinCommand(), "GET", "/v1/cluster/join-command"],
    ["nodes.setCheckpointEvery", () => c.nodes.setCheckpointEvery("p", { every: "15m" }), "PUT", "/v1/projects/p/checkpoint", { every: "15m" }],
    ["nodes.checkpointEvery", () => c.nodes.checkpointEvery("p"), "GET", "/v1/projects/p/checkpoint"],
  ];
  for (const [name, call, method, path, body, headers = []] of cases) {
    test(name, async () => {
      srv.requests.length = 0;
      await call();
      assert.equal(srv.requests.length, 1);
      const r = srv.requests[0];
      assert.equal(r.method, method);
      assert.equal(r.url, path);
      assert.equal(r.headers.authorization, "Bearer t");
      if (body === undefined) assert.equal(r.body, "");
      else {
        assert.deepEqual(JSON.parse(r.body), body);
        assert.equal(r.headers["content-type"], "application/json");
      }
      for (const h of headers) {
        const [k, v] = h.split("=");
        const got = r.headers[k.toLowerCase()];
        assert.ok(got, `header ${k}`);
        if (v) assert.equal(got, v);
      }
      if (!headers.includes(K)) assert.equal(r.headers["idempotency-key"], undefined);
    });
  }

  test("images.import: tar, gzip (Blob and stream), content type by the first bytes", async () => {
    const tar = new Uint8Array(1024);
    const gz = new Uint8Array([0x1f, 0x8b, 8, 0, 1, 2, 3]);
    const inputs = [
      ["Uint8Array tar", tar, "application/x-tar", tar],
      ["Blob gzip", new Blob([gz]), "application/gzip", gz],
      ["ArrayBuffer gzip", gz.buffer.slice(0), "application/gzip", gz],
      [
        "stream gzip split after one byte",
        new ReadableStream({
          start(ctl) {
            ctl.enqueue(gz.subarray(0, 1));
            ctl.enqueue(gz.subarray(1));
            ctl.close();
          },
        }),
        "application/gzip",
        gz,
      ],
    ];
    for (const [what, input, ct, want] of inputs) {
      srv.requests.length = 0;
      await c.images.import("base-1", input);
      const r = srv.requests[0];
      assert.equal(r.url, "/v1/images?name=base-1", what);
      assert.equal(r.method, "POST", what);
      assert.equal(r.headers["content-type"], ct, what);
      assert.deepEqual(new Uint8Array(r.raw), want, what);
    }
  });
});
