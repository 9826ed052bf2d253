// Projects: each with its current version, instances running and stored
// bytes; the tenant's stored bytes against its quota; a form to create one.

import type { Instance, Project, Version } from "../../sdk/typescript/src/index.js";
import { h, replace, field } from "./dom.js";
import { call } from "./session.js";
import { bytes, time, layerBytes } from "./format.js";
import { errorBox, note, pageTitle, table, announce } from "./ui.js";

export async function projectsPage(main: HTMLElement): Promise<void> {
  const [projects, instances, usage, images] = await Promise.all([
    call((c) => c.projects.list()),
    call((c) => c.instances.list()),
    call((c) => c.usage()),
    call((c) => c.images.list()),
  ]);
  const versions = new Map<string, Version[]>();
  await Promise.all(
    projects.map(async (p) => versions.set(p.name, await call((c) => c.versions.list(p.name)))),
  );
  const running = (p: string) => instances.filter((i: Instance) => i.project === p && i.state === "Running").length;
  // What counts against the quota: the layers the project's versions added (not the shared base).
  const stored = (p: string) => {
    const vs = versions.get(p) ?? [];
    return vs.reduce((n, v) => n + (v.state === "ready" ? layerBytes(v, vs) : 0), 0);
  };
  const quota = usage.quota.max_stored_bytes ?? 0;

  const meter = quota > 0
    ? h("meter", { id: "stored-meter", min: 0, max: quota, value: usage.stored_bytes, "aria-label": "Stored bytes against the quota" })
    : null;
  const summary = h(
    "section",
    { class: "card", "aria-labelledby": "usage-h" },
    h("h2", { id: "usage-h" }, "Usage"),
    h("p", { id: "usage-stored" }, `Stored: ${bytes(usage.stored_bytes)}`, quota > 0 ? ` of ${bytes(quota)} quota` : " (no quota)", ` · versions ${bytes(usage.version_bytes)}, volumes ${bytes(usage.volume_bytes)}, writable layers ${bytes(usage.disk_bytes)}`),
    meter,
    h("p", null, `Instances: ${usage.instances}`, usage.quota.max_instances ? ` of ${usage.quota.max_instances}` : ""),
  );

  const rows = projects.map((p: Project) => [
    h("a", { href: `#/projects/${encodeURIComponent(p.name)}` }, p.name),
    p.current_version ? `v${p.current_version}` : "none",
    String(running(p.name)),
    `${bytes(stored(p.name))}${quota > 0 ? ` of ${bytes(quota)}` : ""}`,
    shortImage(p.base_image),
    time(p.created_at),
  ]);

  replace(
    main,
    pageTitle("Projects"),
    summary,
    table("Your projects", ["Project", "Current", "Running", "Own layers", "Base image", "Created"], rows, { id: "projects-table" }),
    createForm(images.map((i) => i.name)),
  );
}

function createForm(images: string[]): HTMLElement {
  const name = h("input", { id: "new-project-name", name: "name", required: true, pattern: "[a-z0-9][a-z0-9\\-]*", autocomplete: "off" });
  const base = h("select", { id: "new-project-base", name: "base" }, images.map((i) => h("option", { value: i }, i)));
  const out = h("div", { id: "create-project-result" });
  const form = h(
    "form",
    { class: "card", id: "create-project", "aria-labelledby": "create-h" },
    h("h2", { id: "create-h" }, "Create a project"),
    h("div", { class: "row" }, field("Name", name, "Lower-case letters, digits and dashes."), field("Base image", base)),
    h("button", { type: "submit", class: "primary" }, "Create project"),
    out,
  );
  if (images.length === 0) replace(out, note("warn", "No image is imported yet: envctl image import ROOTFS NAME (admin)."));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const submit = form.querySelector<HTMLButtonElement>("button[type=submit]")!;
    submit.disabled = true;
    try {
      const p = await call((c) => c.projects.create({ name: name.value.trim(), base: base.value }));
      announce(`Project ${p.name} created.`);
      location.hash = `#/projects/${encodeURIComponent(p.name)}`;
    } catch (e) {
      replace(out, errorBox(e, "Create failed"));
    } finally {
      submit.disabled = false;
    }
  });
  return form;
}

/** repo@sha256:0123456789ab… : the digest cut to 12 hex digits. */
function shortImage(ref: string): string {
  const m = /^(.*@sha256:)([0-9a-f]{12})[0-9a-f]+$/.exec(ref);
  return m ? `${m[1]}${m[2]}…` : ref;
}
