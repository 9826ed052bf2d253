// A project's history: the versions as a timeline (switch, pin, roll back,
// start from), a build of a new version (build.ts), its checkpoints (resume one, with its processes when it holds
// memory), what changed between two versions, a chart of stored bytes over
// time, and its instances.

import { ConflictError, type Changes, type Checkpoint, type OperationEvent, type Project, type Version } from "../../sdk/typescript/src/index.js";
import { h, replace, field, button, svg, type Child } from "./dom.js";
import { call, SignedOut } from "./session.js";
import { bytes, time, layerBytes } from "./format.js";
import { details, errorBox, note, pageTitle, stateBadge, table, announce } from "./ui.js";
import { startInstanceForm } from "./instances.js";
import { buildForm } from "./build.js";

export async function projectPage(main: HTMLElement, [name]: string[]): Promise<void> {
  const p = name!;
  const flash = h("div", { id: "project-flash", "aria-live": "polite" });
  const summary = h("section", { class: "card", "aria-labelledby": "summary-h" });
  const timeline = h("section", { class: "card", "aria-labelledby": "timeline-h", id: "timeline" });
  const chart = h("section", { class: "card", "aria-labelledby": "chart-h" });
  const compare = h("section", { class: "card", "aria-labelledby": "compare-h" });
  const insts = h("section", { class: "card", "aria-labelledby": "insts-h" });
  const ckpts = h("section", { class: "card", "aria-labelledby": "checkpoints-h", id: "checkpoints" });
  const egress = h("section", { class: "card", "aria-labelledby": "egress-h" });
  replace(main, pageTitle(`Project ${p}`), flash, summary, startInstanceForm(p, flash), timeline, buildForm(p, () => load()), ckpts, compare, chart, insts, egress);

  // What this page believes current is: the expected value of a switch.
  let shown: Project;
  let versions: Version[] = [];

  const load = async () => {
    const [proj, vs, is, denials, cps] = await Promise.all([
      call((c) => c.projects.get(p)),
      call((c) => c.versions.list(p)),
      call((c) => c.instances.list(p)),
      call((c) => c.projects.egressLog(p, { limit: 50 })),
      call((c) => c.checkpoints(p)),
    ]);
    shown = proj;
    versions = [...vs].sort((a, b) => b.version - a.version);
    replace(
      summary,
      h("h2", { id: "summary-h" }, "Summary"),
      details([
        ["Current version", h("span", { id: "current-version" }, proj.current_version ? `v${proj.current_version}` : "none")],
        ["Base image", proj.base_image],
        ["Current base", proj.current_base ?? ""],
        ["Compression", proj.compression],
        ["Egress", proj.egress],
        ["Runtime class", proj.runtime_class ?? "node default"],
        ["Own layers (image growth)", bytes(vs.filter((v) => v.state === "ready").reduce((n, v) => n + layerBytes(v, vs), 0))],
        ["Created", time(proj.created_at)],
        proj.rollout_failure ? ["Rollout failure", `${proj.rollout_failure.status}: ${proj.rollout_failure.message ?? ""}`] : ["Rollout failure", "none"],
      ]),
    );
    renderTimeline();
    renderCheckpoints(cps);
    renderCompare();
    replace(chart, h("h2", { id: "chart-h" }, "Stored bytes over time"), storedChart(versions));
    replace(
      insts,
      h("h2", { id: "insts-h" }, "Instances"),
      table(
        `Instances of ${p}`,
        ["Instance", "State", "Version", "Generation", "Expires"],
        is.filter((i) => i.state !== "Terminated").map((i) => [
          h("a", { href: `#/instances/${encodeURIComponent(i.id)}` }, i.id),
          stateBadge(i.state),
          `v${i.version}`,
          String(i.generation),
          time(i.expires_at),
        ]),
      ),
    );
    // What the node's egress gateway refused (egress by host name).
    replace(
      egress,
      h("h2", { id: "egress-h" }, "Egress refusals"),
      table(
        `Egress refusals of ${p}, newest first`,
        ["Time", "Instance", "Kind", "Name", "Destination", "Reason"],
        denials.map((d) => [time(d.time), d.instance, d.kind, d.name ?? "", d.dest ?? "", d.reason]),
        { id: "egress-table" },
      ),
    );
  };

  const act = async (what: string, f: () => Promise<unknown>) => {
    replace(flash);
    try {
      await f();
    } catch (e) {
      if (e instanceof SignedOut) return;
      if (e instanceof ConflictError) {
        // Someone moved current since this page read it: say so, with the
        // value it has now, and show the history as it is.
        let now = "unknown";
        try {
          now = `v${(await call((c) => c.projects.get(p))).current_version}`;
        } catch {
          // keep "unknown"
        }
        replace(
          flash,
          note(
            "error",
            h("strong", null, "Conflict: "),
            h("span", { id: "conflict-message" }, `${what} was refused: current changed meanwhile. It is now ${now}, not v${shown.current_version} as this page showed. Nothing was changed.`),
            " ",
            h("small", null, e.message),
          ),
        );
        announce(`Conflict: current is now ${now}`);
      } else {
        replace(flash, errorBox(e, what));
      }
    }
    await load().catch((e) => flash.append(errorBox(e)));
  };

  const switchTo = (n: number, verb: string) =>
    act(`${verb} to v${n}`, async () => {
      const proj = await call((c) => c.versions.setCurrent(p, n, shown.current_version));
      replace(flash, note("ok", h("span", { id: "switch-message" }, `Current is now v${proj.current_version} (was v${shown.current_version}).`)));
      announce(`Current is now v${proj.current_version}`);
    });

  function renderTimeline(): void {
    const current = versions.find((v) => v.current);
    // Roll back: to the newest ready version older than current.
    const back = current ? versions.find((v) => v.version < current.version && v.state === "ready") : undefined;
    const items = versions.map((v) => {
      const tags: Child[] = [];
      if (v.current) tags.push(h("span", { class: "badge current" }, "current"));
      if (v.pinned) tags.push(h("span", { class: "badge pinned" }, "pinned"));
      if (v.state !== "ready") tags.push(h("span", { class: "badge warn" }, v.state));
      return h(
        "li",
        { class: `version${v.current ? " is-current" : ""}`, id: `version-${v.version}`, "data-version": v.version },
        h("div", { class: "v-head" }, h("h3", null, `v${v.version}`), h("span", { class: "kind" }, v.kind), tags),
        h("p", { class: "v-msg" }, v.message || h("em", null, "no message")),
        h("p", { class: "v-meta" }, time(v.created_at), v.parent ? ` · +${bytes(layerBytes(v, versions))} over v${v.parent}` : "", ` · image ${bytes(v.size_bytes)} in ${v.layers} layer${v.layers === 1 ? "" : "s"}`, v.instance_id ? ` · saved from ${v.instance_id}` : ""),
        h(
          "div",
          { class: "actions" },
          v.current || v.state !== "ready" ? null : button(`Make v${v.version} current`, () => switchTo(v.version, "Switch"), { class: "switch", "data-version": v.version }),
          button(v.pinned ? `Unpin v${v.version}` : `Pin v${v.version}`, () =>
            act(v.pinned ? "Unpin" : "Pin", async () => {
              await call((c) => (v.pinned ? c.versions.unpin(p, v.version) : c.versions.pin(p, v.version)));
              announce(`v${v.version} ${v.pinned ? "unpinned" : "pinned"}`);
            }),
          ),
          v.parent ? button(`What changed in v${v.version}`, () => showChanges(v.version, v.parent!)) : null,
        ),
      );
    });
    replace(
      timeline,
      h("div", { class: "section-head" }, h("h2", { id: "timeline-h" }, "History"), back ? button(`Roll back to v${back.version}`, () => switchTo(back.version, "Roll back"), { id: "rollback" }) : null),
      h("ol", { class: "timeline", id: "versions" }, items),
    );
  }

  // Checkpoints: whether each holds memory (its processes), what it stores
  // (bytes: all it holds; new: what it added, which the quota counts), its
  // freeze window, and a start from it: with memory, the new instance
  // continues the checkpoint's processes (as envctl up --checkpoint).
  const resumeLog = h("ol", { class: "events", id: "resume-events", "aria-live": "polite" });
  function renderCheckpoints(cps: Checkpoint[]): void {
    const rows = cps.map((c) => {
      const m = c.memory;
      const label = m ? `Resume with memory from checkpoint ${c.id}` : `Start from checkpoint ${c.id}`;
      return [
        String(c.id),
        `v${c.version}`,
        h("span", { class: m ? "badge current" : "badge", "data-memory": m ? "yes" : "no" }, m ? "memory" : "files only"),
        m ? `${bytes(m.bytes)} (${bytes(m.new_bytes)} new)` : "",
        bytes(c.bytes),
        m ? `${c.freeze_ms} ms (engine ${m.freeze_ms} ms)` : `${c.freeze_ms} ms`,
        m?.resumed_by ?? "",
        time(c.created_at),
        c.message ?? "",
        button(m ? "Resume with memory" : "Start from it", () => resume(c), { class: "resume", "data-checkpoint": c.id, "aria-label": label }),
      ];
    });
    replace(
      ckpts,
      h("h2", { id: "checkpoints-h" }, "Checkpoints"),
      cps.length === 0
        ? note("info", "No checkpoints. envctl checkpoint INSTANCE --memory keeps an instance's files and processes.")
        : table(`Checkpoints of ${p}, newest first`, ["Id", "Version", "Holds", "Memory image", "Stored", "Freeze", "Resumed by", "Created", "Message", "Action"], rows, { id: "checkpoints-table" }),
      resumeLog,
    );
  }

  async function resume(c: Checkpoint): Promise<void> {
    replace(flash);
    replace(resumeLog);
    try {
      const inst = await call((cl) => cl.instances.up(p, { checkpoint: c.id }, { onEvent: (e: OperationEvent) => resumeLog.append(h("li", null, h("strong", null, e.type), " ", e.message)) }));
      announce(`Instance ${inst.id} resumed checkpoint ${c.id}.`);
      location.hash = `#/instances/${encodeURIComponent(inst.id)}`;
    } catch (e) {
      if (!(e instanceof SignedOut)) replace(flash, errorBox(e, `Resume of checkpoint ${c.id}`));
    }
  }

  const changesOut = h("div", { id: "changes-out" });
  async function showChanges(n: number, against: number): Promise<void> {
    replace(changesOut, h("p", null, `Comparing v${against} with v${n}…`));
    compare.scrollIntoView({ block: "start" });
    try {
      const ch = await call((c) => c.versions.changes(p, n, { against, limit: 200 }));
      replace(changesOut, changesView(ch));
    } catch (e) {
      replace(changesOut, errorBox(e, "What changed"));
    }
  }

  function renderCompare(): void {
    const ready = versions.filter((v) => v.state === "ready");
    const opts = (sel?: number) => ready.map((v) => h("option", { value: v.version, selected: v.version === sel }, `v${v.version} · ${v.kind}${v.message ? " · " + v.message : ""}`));
    const from = h("select", { id: "compare-from" }, opts(ready[1]?.version));
    const to = h("select", { id: "compare-to" }, opts(ready[0]?.version));
    const form = h("form", { class: "row" }, field("From", from), field("To", to), h("button", { type: "submit" }, "Compare"));
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      void showChanges(Number(to.value), Number(from.value));
    });
    replace(compare, h("h2", { id: "compare-h" }, "What changed between two versions"), ready.length < 2 ? note("info", "Only one ready version: nothing to compare yet.") : form, changesOut);
  }

  await load();
}

function changesView(ch: Changes): HTMLElement {
  const list = (title: string, items: Child[]) => (items.length ? h("div", null, h("h3", null, title), h("ul", { class: "changes" }, items.map((i) => h("li", null, i)))) : null);
  const pk = ch.packages;
  return h(
    "div",
    { class: "changes-view" },
    h("p", { id: "changes-totals" }, `v${ch.against} → v${ch.version}: ${ch.totals.added} added, ${ch.totals.modified} modified, ${ch.totals.deleted} deleted, ${bytes(ch.totals.added_bytes)} added or rewritten`, ch.truncated ? " (lists cut)" : ""),
    pk
      ? list(`Packages (${pk.manager})`, [
          ...pk.added.map((x) => `+ ${x.name} ${x.version}`),
          ...pk.removed.map((x) => `- ${x.name} ${x.version}`),
          ...pk.upgraded.map((x) => `~ ${x.name} ${x.from} → ${x.to}`),
        ])
      : null,
    list("Added", ch.added.map((f) => `${f.path} (${f.type}, ${bytes(f.size)})`)),
    list("Modified", ch.modified.map((f) => `${f.path} (${bytes(f.was?.size ?? 0)} → ${bytes(f.size)})`)),
    list("Deleted", ch.deleted.map((f) => f.path)),
    list("Counted, not listed", ch.summarized.map((s) => `${s.path}: +${s.added} ~${s.modified} -${s.deleted}, ${bytes(s.bytes)} (${s.reason})`)),
  );
}

/**
 * Stored bytes over time: after each version, the layer bytes of the
 * ready versions made so far (a step line), as plain SVG with a text
 * equivalent.
 */
function storedChart(versions: Version[]): HTMLElement {
  const vs = versions.filter((v) => v.state === "ready").sort((a, b) => Date.parse(a.created_at) - Date.parse(b.created_at));
  if (vs.length === 0) return note("info", "No ready version yet.");
  let total = 0;
  const points = vs.map((v) => ({ t: Date.parse(v.created_at), y: (total += layerBytes(v, versions)), v: v.version }));
  if (points.length === 1) points.push({ ...points[0]!, t: Date.now() });
  const W = 640, H = 200, L = 70, R = 16, T = 12, B = 34;
  const t0 = points[0]!.t, t1 = Math.max(points[points.length - 1]!.t, t0 + 1);
  const ymax = Math.max(total, 1);
  const x = (t: number) => L + ((t - t0) / (t1 - t0)) * (W - L - R);
  const y = (b: number) => T + (1 - b / ymax) * (H - T - B);
  let d = `M ${x(points[0]!.t).toFixed(1)} ${y(points[0]!.y).toFixed(1)}`;
  for (const p of points.slice(1)) d += ` H ${x(p.t).toFixed(1)} V ${y(p.y).toFixed(1)}`;
  const desc = points.map((p) => `v${p.v} ${new Date(p.t).toISOString()}: ${bytes(p.y)}`).join("; ");
  const chart = svg(
    "svg",
    { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", "aria-labelledby": "chart-title chart-desc", id: "stored-chart" },
    svg("title", { id: "chart-title" }, "Stored bytes over time"),
    svg("desc", { id: "chart-desc" }, desc),
    svg("line", { x1: L, y1: y(0), x2: W - R, y2: y(0), class: "axis" }),
    svg("line", { x1: L, y1: T, x2: L, y2: y(0), class: "axis" }),
    svg("text", { x: L - 6, y: y(ymax) + 4, "text-anchor": "end", class: "tick" }, bytes(ymax)),
    svg("text", { x: L - 6, y: y(0) + 4, "text-anchor": "end", class: "tick" }, "0"),
    svg("text", { x: L, y: H - 10, class: "tick" }, new Date(t0).toISOString().slice(0, 16).replace("T", " ")),
    svg("text", { x: W - R, y: H - 10, "text-anchor": "end", class: "tick" }, new Date(t1).toISOString().slice(0, 16).replace("T", " ")),
    svg("path", { d, class: "line" }),
    ...points.map((p) => svg("circle", { cx: x(p.t), cy: y(p.y), r: 4, class: "dot" }, svg("title", {}, `v${p.v}: ${bytes(p.y)}`))),
  );
  return h("figure", null, chart, h("figcaption", null, `What the project's ${vs.length} ready versions added to their images (each over its parent; the base image is shared, not counted): ${bytes(total)} in all.`));
}
