// src/types.ts is written by hand from the Go package api/types. This test
// keeps them in step: every Go struct with JSON fields has an interface that
// names it ("Go: types.X"), with the same JSON field names, and a field is
// optional (`?`) exactly when the Go field is omitempty, omitzero or a
// pointer, but for the deliberate exceptions below. When docs/openapi.yaml
// exists, the same comparison against its schemas replaces this one.
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { test } from "node:test";

const root = new URL("../../../../", import.meta.url);
const read = (p) => readFileSync(new URL(p, root), "utf8");

/** Go structs of api/types with their JSON fields: name -> optional. */
function goStructs() {
  const out = {};
  // Every Go file of the package, tests aside: a new file's structs count too.
  const files = readdirSync(new URL("api/types/", root)).filter((f) => f.endsWith(".go") && !f.endsWith("_test.go"));
  assert.ok(files.includes("types.go") && files.includes("files.go"), `api/types files: ${files}`);
  for (const file of files.map((f) => "api/types/" + f)) {
    for (const m of read(file).matchAll(/^type (\w+) struct \{\n([\s\S]*?)^\}/gm)) {
      const fields = {};
      for (const line of m[2].split("\n")) {
        const f = /^\s*\w+\s+(\S+)\s+`json:"([^"]*)"`/.exec(line);
        if (!f) continue;
        const [name, ...opts] = f[2].split(",");
        if (name === "-") continue;
        fields[name] = opts.includes("omitempty") || opts.includes("omitzero") || f[1].startsWith("*");
      }
      if (Object.keys(fields).length > 0) out[m[1]] = fields;
    }
  }
  return out;
}

/** Interfaces of src/types.ts that name a Go type: Go name -> {ts, fields}. */
function tsInterfaces() {
  const lines = read("sdk/typescript/src/types.ts").split("\n");
  const out = {};
  for (let i = 0; i < lines.length; i++) {
    const m = /^export interface (\w+)/.exec(lines[i]);
    if (!m) continue;
    let goName;
    for (let j = i - 1; j >= 0 && /^\s*(\/\*\*|\*|\/\/)/.test(lines[j]); j--) {
      const g = /Go: types\.(\w+)/.exec(lines[j]);
      if (g) goName = g[1];
    }
    const fields = {};
    for (let j = i + 1; lines[j] !== "}"; j++) {
      const f = /^ {2}(\w+)(\?)?:/.exec(lines[j]);
      if (f) fields[f[1]] = f[2] === "?";
    }
    if (goName) out[goName] = { ts: m[1], fields };
  }
  return out;
}

// Deliberate differences, each with its reason.
const exceptions = {
  // A switch is a compare-and-swap: the SDK makes the expectation required.
  "SetCurrentRequest.expected_current": true,
  // A request body: absent is false on the server.
  "ProjectNetwork.isolate_instances": true,
};
// Go types that are not part of a request or answer body.
const internal = new Set(["Principal"]);

test("src/types.ts mirrors api/types: every struct, field and optionality", () => {
  const go = goStructs();
  const ts = tsInterfaces();
  assert.ok(Object.keys(go).length > 30, "the Go structs were found");
  const problems = [];
  for (const [name, fields] of Object.entries(go)) {
    if (internal.has(name)) continue;
    const t = ts[name];
    if (!t) {
      problems.push(`types.${name} has no interface (mark one with "Go: types.${name}")`);
      continue;
    }
    for (const [f, optional] of Object.entries(fields)) {
      if (!(f in t.fields)) problems.push(`${t.ts}.${f} is missing (types.${name})`);
      else if (t.fields[f] !== optional && !exceptions[`${name}.${f}`]) {
        problems.push(`${t.ts}.${f} should be ${optional ? "optional" : "required"} (types.${name})`);
      }
    }
    for (const f of Object.keys(t.fields)) {
      if (!(f in fields)) problems.push(`${t.ts}.${f} is not a field of types.${name}`);
    }
  }
  assert.deepEqual(problems, []);
});
