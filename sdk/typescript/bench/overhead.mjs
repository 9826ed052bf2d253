// The SDK's overhead against raw fetch calls: EXECS buffered execs (default
// 1000) and SAVES saves waited for (default 100), alternating SDK and raw in
// rounds so both see the same server. Needs ENVD_URL, ENVD_TOKEN (admin) and
// ENVD_IMAGE like the integration tests. Prints one JSON line.
//
//   ENVD_URL=... ENVD_TOKEN=... ENVD_IMAGE=fixture node bench/overhead.mjs
import { randomBytes } from "node:crypto";

import { Client } from "../dist/index.js";

const { ENVD_URL, ENVD_TOKEN, ENVD_IMAGE } = process.env;
if (!ENVD_URL || !ENVD_TOKEN || !ENVD_IMAGE) {
  console.error("set ENVD_URL, ENVD_TOKEN and ENVD_IMAGE");
  process.exit(2);
}
const EXECS = Number(process.env.EXECS ?? 1000);
const SAVES = Number(process.env.SAVES ?? 100);
const ROUNDS = 10;

const c = new Client({ url: ENVD_URL, token: ENVD_TOKEN });
const h = { Authorization: `Bearer ${ENVD_TOKEN}`, "Content-Type": "application/json", Accept: "application/json" };
const raw = async (method, path, body, extra = {}) => {
  const res = await fetch(ENVD_URL + path, { method, headers: { ...h, ...extra }, body: body && JSON.stringify(body) });
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${await res.text()}`);
  return res.json();
};

const project = `sdkbench-${randomBytes(4).toString("hex")}`;
await c.projects.create({ name: project, base: ENVD_IMAGE });
const inst = await c.instances.create(project, { ttl: "1h" });
const args = ["true"];

const time = async (n, f) => {
  const t0 = performance.now();
  for (let i = 0; i < n; i++) await f(i);
  return performance.now() - t0;
};

// Raw save: POST save, then poll the operation (what a client without the SDK does).
const rawSave = async (i) => {
  const op = await raw("POST", `/v1/instances/${inst.id}/save`, { message: `raw ${i}` }, { "Idempotency-Key": `raw-${project}-${i}` });
  for (;;) {
    const o = await raw("GET", `/v1/operations/${op.id}`);
    if (["succeeded", "failed", "canceled"].includes(o.state)) {
      if (o.state !== "succeeded") throw new Error(`raw save ${o.state}: ${JSON.stringify(o.error)}`);
      return;
    }
    await new Promise((r) => setTimeout(r, 20));
  }
};
const sdkSave = async (i) => {
  const op = await c.instances.save(inst.id, { message: `sdk ${i}` });
  await c.operations.result(op.id);
};

const totals = { exec_sdk_ms: 0, exec_raw_ms: 0, save_sdk_ms: 0, save_raw_ms: 0 };
try {
  await time(20, () => c.instances.exec(inst.id, { args })); // warm up
  for (let r = 0; r < ROUNDS; r++) {
    totals.exec_sdk_ms += await time(EXECS / ROUNDS, () => c.instances.exec(inst.id, { args }));
    totals.exec_raw_ms += await time(EXECS / ROUNDS, () => raw("POST", `/v1/instances/${inst.id}/exec`, { args }));
  }
  for (let r = 0; r < ROUNDS; r++) {
    totals.save_sdk_ms += await time(SAVES / ROUNDS, (i) => sdkSave(r * 1000 + i));
    totals.save_raw_ms += await time(SAVES / ROUNDS, (i) => rawSave(r * 1000 + i));
  }
} finally {
  await c.instances.delete(inst.id).catch(() => {});
  await c.projects.delete(project).catch(() => {});
}
const round = (x) => Math.round(x * 10) / 10;
console.log(
  JSON.stringify({
    execs: EXECS,
    saves: SAVES,
    exec_sdk_ms: round(totals.exec_sdk_ms),
    exec_raw_ms: round(totals.exec_raw_ms),
    exec_ratio: round((totals.exec_sdk_ms / totals.exec_raw_ms) * 100) / 100,
    save_sdk_ms: round(totals.save_sdk_ms),
    save_raw_ms: round(totals.save_raw_ms),
    save_ratio: round((totals.save_sdk_ms / totals.save_raw_ms) * 100) / 100,
  }),
);
