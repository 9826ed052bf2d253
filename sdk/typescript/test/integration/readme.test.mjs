// Runs the README's example, as written there, against a live envd (with
// this run's project and image names): what the README shows must work.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { promisify } from "node:util";

import { Client } from "../../dist/index.js";

const { ENVD_URL, ENVD_TOKEN, ENVD_IMAGE } = process.env;

test("the README's example runs", async () => {
  assert.ok(ENVD_URL && ENVD_TOKEN && ENVD_IMAGE, "set ENVD_URL, ENVD_TOKEN (admin) and ENVD_IMAGE: the README's example needs a live envd");
  const readme = readFileSync(new URL("../../README.md", import.meta.url), "utf8");
  const m = /## Example[^\n]*\n[\s\S]*?```ts\n([\s\S]*?)```/.exec(readme);
  assert.ok(m, "the README has an example");
  const project = `readme-${randomBytes(4).toString("hex")}`;
  const code = m[1]
    .replace(`from "@envd/sdk"`, `from ${JSON.stringify(new URL("../../dist/index.js", import.meta.url).href)}`)
    .replaceAll(`"web"`, JSON.stringify(project))
    .replaceAll(`"create-web"`, JSON.stringify(`create-${project}`))
    .replaceAll(`"busybox"`, JSON.stringify(ENVD_IMAGE));
  const file = join(mkdtempSync(join(tmpdir(), "envd-readme-")), "example.mjs");
  writeFileSync(file, code);
  const c = new Client({ url: ENVD_URL, token: ENVD_TOKEN });
  try {
    const { stdout } = await promisify(execFile)(process.execPath, ["--experimental-websocket", file], { timeout: 5 * 60_000 });
    assert.match(stdout, /^0 hello$/m, "buffered exec");
    assert.match(stdout, /^STREAMED$/m, "streaming exec");
    assert.match(stdout, /^exit 0$/m);
    assert.match(stdout, /^version 2 current true conflict false$/m, "save");
    assert.equal((await c.projects.get(project)).current_version, 1, "rolled back");
    const instances = await c.instances.list(project);
    assert.ok(instances.length > 0 && instances.every((i) => i.state === "Terminated"));
  } finally {
    for (const i of await c.instances.list(project).catch(() => [])) await c.instances.delete(i.id).catch(() => {});
    await c.projects.delete(project).catch(() => {});
  }
});
