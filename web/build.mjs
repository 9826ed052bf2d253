// Builds the console into dist/ (or --outdir DIR): one script and one
// stylesheet named by their content's hash, index.html naming them, and the
// icon. Deterministic: the same sources give the same bytes (web/web_test.go
// checks the committed dist/ against a fresh build).
import * as esbuild from "esbuild";
import { createHash } from "node:crypto";
import { mkdir, readFile, readdir, rm, writeFile, copyFile } from "node:fs/promises";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const argOut = process.argv.indexOf("--outdir");
const outdir = path.resolve(argOut > 0 ? process.argv[argOut + 1] : path.join(here, "dist"));

// xterm.js's DOM renderer makes <style> elements and sets style attributes
// with setAttribute. Under the console's Content-Security-Policy (no
// 'unsafe-inline') the first need the page's nonce and the second are
// refused, so both are rewritten: <style> elements get the nonce
// (src/csp.ts), style attributes are set through CSSOM (style.cssText),
// which the policy allows. The build fails when xterm's code no longer
// has what is rewritten, rather than ship a terminal the policy breaks.
const xtermCSP = {
  name: "xterm-csp",
  setup(build) {
    build.onLoad({ filter: /@xterm[\\/]xterm[\\/]lib[\\/]xterm\.mjs$/ }, async (args) => {
      let src = await readFile(args.path, "utf8");
      let styles = 0;
      src = src.replace(/([A-Za-z_$][\w$]*(?:\.[A-Za-z_$][\w$]*)*)\.createElement\("style"\)/g, (_, doc) => {
        styles++;
        return `__envdNoncedStyle(${doc})`;
      });
      const attr = 't.setAttribute("style",`${t.getAttribute("style")||""}${e};`)';
      const attrs = src.split(attr).length - 1;
      src = src.replaceAll(attr, "t.style.cssText+=`${e};`");
      if (styles !== 3 || attrs !== 1) {
        throw new Error(`xterm-csp: expected 3 <style> elements and 1 style attribute in ${args.path}, found ${styles} and ${attrs}: update build.mjs for this xterm version`);
      }
      const csp = path.join(here, "src", "csp.ts").split(path.sep).join("/");
      return { contents: `import { noncedStyle as __envdNoncedStyle } from ${JSON.stringify(csp)};\n${src}`, loader: "js" };
    });
  },
};

await rm(outdir, { recursive: true, force: true });
await mkdir(outdir, { recursive: true });
const result = await esbuild.build({
  absWorkingDir: here,
  entryPoints: { app: "src/main.ts" },
  bundle: true,
  minify: true,
  format: "esm",
  target: ["chrome110", "firefox115", "safari16"],
  outdir,
  entryNames: "[name]-[hash]",
  assetNames: "[name]-[hash]",
  metafile: true,
  legalComments: "eof",
  charset: "utf8",
  logLevel: "warning",
  plugins: [xtermCSP],
});

const outputs = Object.keys(result.metafile.outputs).map((p) => path.basename(p));
const js = outputs.find((f) => f.endsWith(".js"));
const css = outputs.find((f) => f.endsWith(".css"));
if (!js || !css) throw new Error(`build: expected a script and a stylesheet, got ${outputs.join(", ")}`);
const html = (await readFile(path.join(here, "src", "index.html"), "utf8")).replaceAll("{{app.js}}", js).replaceAll("{{app.css}}", css);
await writeFile(path.join(outdir, "index.html"), html);
await copyFile(path.join(here, "src", "favicon.svg"), path.join(outdir, "favicon.svg"));

let total = 0;
const lines = [];
for (const f of (await readdir(outdir)).sort()) {
  const b = await readFile(path.join(outdir, f));
  total += b.length;
  lines.push(`${f} ${b.length} ${createHash("sha256").update(b).digest("hex").slice(0, 12)}`);
}
console.log(lines.join("\n") + `\ntotal ${total} bytes in ${outdir}`);
