// envd's MCP server, driven by the official MCP TypeScript SDK's client over
// stdio (spawning `envd mcp`) and over streamable HTTP (the node's /mcp).
// e2e TestRootMCPTypeScript runs it with ENVD_URL, ENVD_TOKEN (a tenant's
// token), ENVD_BIN (the envd binary), ENVD_IMAGE and ENVD_PROJECT.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const { ENVD_URL, ENVD_TOKEN, ENVD_BIN, ENVD_IMAGE, ENVD_PROJECT } = process.env;
for (const [k, v] of Object.entries({ ENVD_URL, ENVD_TOKEN, ENVD_BIN, ENVD_IMAGE, ENVD_PROJECT })) {
  if (!v) throw new Error(`${k} is not set`);
}

const TOOLS = [
  "list_projects", "create_project", "list_instances", "create_instance", "get_instance", "delete_instance",
  "exec", "read_file", "write_file", "list_files", "save_version", "list_versions", "switch_version",
  "rollback", "fork_instance", "diff", "preview_link",
];

// Saves and forks wait for their operation: longer than the SDK's 60 s default on a busy machine.
const LONG = { timeout: 10 * 60 * 1000 };

function stdio(token) {
  return new StdioClientTransport({
    command: ENVD_BIN,
    args: ["mcp"],
    env: { ...process.env, ENVD_URL, ENVD_TOKEN: token },
    stderr: "pipe",
  });
}

function http(token) {
  return new StreamableHTTPClientTransport(new URL("/mcp", ENVD_URL), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
}

async function connect(transport) {
  const client = new Client({ name: "envd-e2e", version: "0.0.0" });
  await client.connect(transport);
  return client;
}

// call answers a tool's structured content, failing on a tool error.
async function call(client, name, args) {
  const res = await client.callTool({ name, arguments: args }, undefined, LONG);
  assert.ok(!res.isError, `${name}: ${JSON.stringify(res.content)}`);
  assert.equal(res.content[0].type, "text");
  assert.deepEqual(JSON.parse(res.content[0].text), res.structuredContent, `${name}: text and structured content agree`);
  return res.structuredContent;
}

// callError answers a tool error's code and message.
async function callError(client, name, args) {
  const res = await client.callTool({ name, arguments: args }, undefined, LONG);
  assert.equal(res.isError, true, `${name} ${JSON.stringify(args)} should fail: ${JSON.stringify(res.content)}`);
  const { code, message } = res.structuredContent.error;
  assert.ok(res.content[0].text.startsWith(code + ": "), res.content[0].text);
  return { code, message };
}

async function exercise(client, label) {
  const { tools } = await client.listTools();
  assert.deepEqual(tools.map((t) => t.name).sort(), [...TOOLS].sort());
  for (const t of tools) {
    assert.ok(t.description.length > 20, `${t.name} has a description`);
    assert.equal(t.inputSchema.type, "object", `${t.name} has an input schema`);
  }
  const exec = tools.find((t) => t.name === "exec");
  assert.deepEqual(exec.inputSchema.required, ["instance"]);

  const project = `${ENVD_PROJECT}-${label}`;
  const p = await call(client, "create_project", { name: project, base: ENVD_IMAGE });
  assert.equal(p.name, project);
  assert.equal(p.current_version, 1);
  const { projects } = await call(client, "list_projects", {});
  assert.ok(projects.some((x) => x.name === project));

  const inst = await call(client, "create_instance", { project, ttl: "30m" });
  assert.equal(inst.state, "Running");
  assert.equal(inst.version, 1);
  assert.equal((await call(client, "get_instance", { instance: inst.id })).id, inst.id);
  const { instances } = await call(client, "list_instances", { project });
  assert.deepEqual(instances.map((i) => i.id), [inst.id]);

  const run = await call(client, "exec", { instance: inst.id, command: "echo out; echo err >&2; exit 3" });
  assert.equal(run.exit_code, 3);
  assert.equal(run.stdout, "out\n");
  assert.equal(run.stderr, "err\n");
  const argv = await call(client, "exec", { instance: inst.id, args: ["printf", "%s|", "a b", "c"] });
  assert.equal(argv.exit_code, 0);
  assert.equal(argv.stdout, "a b|c|");

  const written = await call(client, "write_file", { instance: inst.id, path: "/work/hello.txt", content: "hello mcp\n", mkdir: true, mode: "0600" });
  assert.equal(written.size, 10);
  assert.equal(written.mode, "0600");
  const read = await call(client, "read_file", { instance: inst.id, path: "/work/hello.txt" });
  assert.equal(read.content, "hello mcp\n");
  assert.equal(read.encoding, "utf-8");
  const part = await call(client, "read_file", { instance: inst.id, path: "/work/hello.txt", offset: 6, length: 3 });
  assert.equal(part.content, "mcp");
  assert.equal(part.truncated, true);
  const bin = await call(client, "write_file", { instance: inst.id, path: "/work/bin", content: Buffer.from([0xff, 0, 1]).toString("base64"), encoding: "base64" });
  assert.equal(bin.size, 3);
  assert.equal((await call(client, "read_file", { instance: inst.id, path: "/work/bin" })).content, "/wAB");
  const ls = await call(client, "list_files", { instance: inst.id, path: "/work" });
  assert.deepEqual(ls.entries.map((e) => e.name).sort(), ["bin", "hello.txt"]);
  assert.equal((await call(client, "exec", { instance: inst.id, command: "cat /work/hello.txt" })).stdout, "hello mcp\n");

  const pending = await call(client, "diff", { instance: inst.id });
  assert.ok(pending.added.some((c) => c.path === "/work/hello.txt"), JSON.stringify(pending.added));

  const saved = await call(client, "save_version", { instance: inst.id, message: "hello from mcp" });
  assert.equal(saved.version, 2);
  assert.equal(saved.current, true);
  let { versions } = await call(client, "list_versions", { project });
  const v2 = versions.find((v) => v.version === 2);
  assert.equal(v2.message, "hello from mcp");
  assert.equal(v2.current, true);
  const d = await call(client, "diff", { project, version: 2 });
  assert.equal(d.against, 1);
  assert.ok(d.added.some((c) => c.path === "/work/hello.txt"), JSON.stringify(d.added));

  const fork = await call(client, "fork_instance", { instance: inst.id, message: "branch", ttl: "30m" });
  assert.equal(fork.version, 3);
  assert.notEqual(fork.instance.id, inst.id);
  assert.equal((await call(client, "exec", { instance: fork.instance.id, command: "cat /work/hello.txt" })).stdout, "hello mcp\n");

  assert.equal((await call(client, "switch_version", { project, version: 3 })).current_version, 3);
  ({ versions } = await call(client, "list_versions", { project }));
  const parent = versions.find((v) => v.version === 3).parent;
  assert.ok(parent > 0 && parent < 3);
  assert.equal((await call(client, "rollback", { project })).current_version, parent);
  assert.equal((await call(client, "rollback", { project, version: 1 })).current_version, 1);
  const lost = await callError(client, "switch_version", { project, version: 2, expected_current: 3 });
  assert.equal(lost.code, "conflict");

  const link = await call(client, "preview_link", { instance: inst.id, port: 8080, ttl: "10m" });
  assert.ok(link.token.length > 20);
  assert.ok(link.proxy_url.startsWith(new URL(`/v1/instances/${inst.id}/ports/8080/`, ENVD_URL).href), link.proxy_url);
  assert.ok(Date.parse(link.expires_at) > Date.now());

  // Bad arguments are tool errors with envd's stable codes.
  assert.equal((await callError(client, "exec", { instance: "i-does-not-exist", command: "true" })).code, "not_found");
  assert.equal((await callError(client, "exec", { instance: inst.id })).code, "invalid_argument");
  assert.equal((await callError(client, "read_file", { instance: inst.id })).code, "invalid_argument"); // no path: the schema's
  assert.equal((await callError(client, "preview_link", { instance: inst.id, port: 70000 })).code, "invalid_argument");
  assert.equal((await callError(client, "read_file", { instance: inst.id, path: "/work/missing" })).code, "not_found");

  assert.equal((await call(client, "delete_instance", { instance: fork.instance.id })).id, fork.instance.id);
  const gone = await call(client, "delete_instance", { instance: inst.id });
  assert.equal(gone.state, "Terminated");
  assert.equal((await call(client, "get_instance", { instance: inst.id })).reason, "user_delete");
}

test("stdio: envd mcp, every tool", async () => {
  const client = await connect(stdio(ENVD_TOKEN));
  try {
    await exercise(client, "stdio");
  } finally {
    await client.close();
  }
});

test("streamable HTTP: /mcp on the node, every tool", async () => {
  const client = await connect(http(ENVD_TOKEN));
  try {
    await exercise(client, "http");
  } finally {
    await client.close();
  }
});

test("stdio: a bad token is an error at start", async () => {
  const t = stdio("not-a-token");
  let stderr = "";
  t.stderr.on("data", (b) => (stderr += b));
  await assert.rejects(connect(t));
  // The process's last words may arrive after the connection failed.
  for (let i = 0; i < 100 && !/unauthenticated/.test(stderr); i++) await new Promise((r) => setTimeout(r, 100));
  assert.match(stderr, /envd API at .*unauthenticated|unauthenticated/);
});

test("HTTP: a bad or missing token is refused with 401", async () => {
  await assert.rejects(connect(http("not-a-token")), (err) => {
    assert.match(String(err), /401|unauthenticated/);
    return true;
  });
  const res = await fetch(new URL("/mcp", ENVD_URL), {
    method: "POST",
    headers: { "Content-Type": "application/json", Accept: "application/json, text/event-stream" },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list" }),
  });
  assert.equal(res.status, 401);
  assert.equal((await res.json()).error.code, "unauthenticated");
});
