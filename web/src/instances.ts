// Instances: the list, one instance's details (state and reason, TTL, idle,
// generation, node, what stop or rm would lose: envctl show's words), its
// actions (save with live progress, stop, start, pause, resume, renew, rm)
// and its terminal.

import type { Instance, InstanceVerb, OperationEvent, SaveResult } from "../../sdk/typescript/src/index.js";
import verbList from "../../api/types/instance_verbs.json";
import { h, replace, field, button } from "./dom.js";
import { call, SignedOut } from "./session.js";
import { relative, time, yesNo, bytes } from "./format.js";
import { details, errorBox, note, pageTitle, stateBadge, table, announce } from "./ui.js";
import { openTerminal } from "./terminal.js";

// The plain verbs (stop, start, pause, resume, ...): the server's list,
// bundled, so a verb added there gets its button, shown in the states it
// may start from, without a line here.
const plainVerbs: InstanceVerb[] = verbList;
const capitalize = (w: string) => w.charAt(0).toUpperCase() + w.slice(1);

export async function instancesPage(main: HTMLElement): Promise<void> {
  const all = await call((c) => c.instances.list());
  const live = all.filter((i) => i.state !== "Terminated");
  replace(
    main,
    pageTitle("Instances"),
    table(
      "Instances (Terminated ones left out)",
      ["Instance", "Project", "State", "Reason", "Version", "Node", "Expires"],
      live.map((i) => [
        h("a", { href: `#/instances/${encodeURIComponent(i.id)}` }, i.id),
        h("a", { href: `#/projects/${encodeURIComponent(i.project)}` }, i.project),
        stateBadge(i.state),
        i.reason,
        `v${i.version}`,
        i.node,
        i.expires_at ? `${time(i.expires_at)} (${relative(i.expires_at)})` : "never",
      ]),
      { id: "instances-table" },
    ),
  );
}

/** The "start an instance" form of a project page, with the restore's events as it runs. */
export function startInstanceForm(project: string, flash: HTMLElement): HTMLElement {
  const ttl = h("input", { id: "new-instance-ttl", name: "ttl", value: "1h", size: 8, autocomplete: "off" });
  const retain = h("input", { id: "new-instance-retain", type: "checkbox", name: "retain" });
  const version = h("input", { id: "new-instance-version", name: "version", inputmode: "numeric", size: 4, placeholder: "current", autocomplete: "off" });
  const log = h("ol", { class: "events", id: "start-events", "aria-live": "polite" });
  const form = h(
    "form",
    { class: "card", id: "start-instance", "aria-labelledby": "start-h" },
    h("h2", { id: "start-h" }, "Start an instance"),
    h(
      "div",
      { class: "row" },
      field("TTL", ttl, "A Go duration (30m, 8h) or none."),
      field("Version", version, "Empty: the current version."),
      h("div", { class: "field check" }, retain, h("label", { for: retain.id || (retain.id = "new-instance-retain") }, "Retain (stop keeps the writable layer)")),
    ),
    h("button", { type: "submit", class: "primary", id: "start-instance-button" }, "Start instance"),
    log,
  );
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const submit = form.querySelector<HTMLButtonElement>("button[type=submit]")!;
    submit.disabled = true;
    replace(log);
    replace(flash);
    try {
      const req = { ttl: ttl.value.trim() || undefined, retain: retain.checked || undefined, version: version.value ? Number(version.value) : undefined };
      const inst = await call((c) => c.instances.up(project, req, { onEvent: (e: OperationEvent) => log.append(h("li", null, h("strong", null, e.type), " ", e.message)) }));
      announce(`Instance ${inst.id} is ${inst.state}.`);
      location.hash = `#/instances/${encodeURIComponent(inst.id)}`;
    } catch (e) {
      if (!(e instanceof SignedOut)) replace(flash, errorBox(e, "Start failed"));
    } finally {
      submit.disabled = false;
    }
  });
  return form;
}

/** The tabs of an instance's pages. */
export function instanceTabs(id: string, active: "overview" | "files" | "ports"): HTMLElement {
  const tab = (key: string, label: string, href: string) =>
    h("li", null, h("a", { href, id: `tab-${key}`, "aria-current": key === active ? "page" : undefined }, label));
  const base = `#/instances/${encodeURIComponent(id)}`;
  return h("nav", { class: "tabs", "aria-label": "Instance" }, h("ul", null, tab("overview", "Overview and terminal", base), tab("files", "Files", `${base}/files`), tab("ports", "Ports and previews", `${base}/ports`)));
}

const SAVE_STEPS = ["spooled", "encoded", "pushed", "committed"] as const;

export async function instancePage(main: HTMLElement, [id]: string[]): Promise<() => void> {
  const iid = id!;
  const flash = h("div", { id: "instance-flash" });
  const info = h("section", { class: "card", "aria-labelledby": "info-h" });
  const actions = h("section", { class: "card", "aria-labelledby": "actions-h" });
  const saveBox = h("section", { class: "card", "aria-labelledby": "save-h" });
  const termBox = h("section", { class: "card terminal-card", "aria-labelledby": "term-h" });
  replace(
    main,
    pageTitle(`Instance ${iid}`),
    instanceTabs(iid, "overview"),
    flash,
    h("div", { class: "instance-grid" }, h("div", { class: "col" }, info, actions, saveBox), h("div", { class: "col" }, termBox)),
  );

  let inst: Instance;
  let term: { close(): void } | undefined;
  let closed = false;

  const load = async () => {
    inst = await call((c) => c.instances.get(iid));
    renderInfo();
    renderActions();
  };

  function renderInfo(): void {
    const i = inst;
    const idle: string[] = [];
    if (i.idle_after) idle.push(`stops after ${i.idle_after} idle (${i.idle_action || "stop"})`);
    if (i.idle_since) idle.push(`idle since ${time(i.idle_since)}`);
    if (i.idle_action_at) idle.push(`acts ${relative(i.idle_action_at)}`);
    if (i.active_sessions) idle.push(`${i.active_sessions} session(s) open`);
    replace(
      info,
      h("h2", { id: "info-h" }, "Details"),
      details([
        ["State", h("span", { id: "instance-state" }, stateBadge(i.state))],
        ["Reason", h("span", { id: "instance-reason" }, i.reason || "-")],
        ["Message", i.message ?? ""],
        ["Project", h("a", { href: `#/projects/${encodeURIComponent(i.project)}` }, i.project)],
        ["Version", `v${i.version}`],
        ["Last saved", i.last_saved_version ? `v${i.last_saved_version}` : ""],
        ["Node", i.node],
        ["Address", i.address ?? ""],
        ["Generation", h("span", { id: "instance-generation" }, String(i.generation))],
        ["Retain", yesNo(i.retain)],
        ["Hibernated as", i.hibernated_version ? `version ${i.hibernated_version} (start brings it back, on any node)` : ""],
        ["Volumes", (i.protection.volumes ?? []).join(", ")],
        ["Limits", i.limits ? limitsText(i.limits) : ""],
        ["Lost on stop", h("span", { id: "lost-on-stop" }, i.protection.lost_on_stop || "-")],
        ["Lost on rm", h("span", { id: "lost-on-rm" }, i.protection.lost_on_remove || "-")],
        ["Expires", h("span", { id: "instance-expires" }, i.expires_at ? `${time(i.expires_at)} (${relative(i.expires_at)})` : "never")],
        ["Idle", h("span", { id: "instance-idle" }, idle.length ? idle.join("; ") : "no idle stop")],
        ["Created", time(i.created_at)],
        ["Last transition", `${time(i.last_transition_at)} (${relative(i.last_transition_at)})`],
        ["Newer current", i.newer_current ? `version ${i.newer_current} (a newer base) is current; this instance keeps version ${i.version} until started anew` : ""],
      ]),
    );
  }

  const verb = (label: string, f: () => Promise<Instance>, title?: string) =>
    button(label, async () => {
      replace(flash);
      try {
        inst = await call(f);
        announce(`${label}: ${inst.state}`);
        replace(flash, note("ok", `${label}: the instance is ${inst.state}.`));
      } catch (e) {
        replace(flash, errorBox(e, label));
      }
      await load().catch(() => {});
    }, { id: `action-${label.toLowerCase()}`, title });

  function renderActions(): void {
    const s = inst.state;
    const renewTTL = h("input", { id: "renew-ttl", value: "1h", size: 8, autocomplete: "off" });
    const confirmBox = h("div", { id: "rm-confirm" });
    const rm = h("button", { type: "button", id: "action-rm", class: "danger" }, "Remove…");
    rm.addEventListener("click", () => {
      replace(
        confirmBox,
        note("warn", h("p", null, "Removing loses: ", h("strong", null, inst.protection.lost_on_remove || "-")), h("div", { class: "actions" },
          button("Remove instance", async () => {
            try {
              closeTerminal(); // the shell dies with the instance: no reconnecting to it
              inst = await call((c) => c.instances.delete(iid));
              replace(flash, note("ok", `Removed: the instance is ${inst.state}.`));
            } catch (e) {
              replace(flash, errorBox(e, "Remove"));
            }
            replace(confirmBox);
            await load().catch(() => {});
          }, { class: "danger", id: "action-rm-confirm" }),
          button("Keep it", () => { replace(confirmBox); rm.focus(); }, { id: "action-rm-cancel" }),
        )),
      );
      confirmBox.querySelector<HTMLButtonElement>("#action-rm-cancel")?.focus();
    });
    const live = s !== "Terminated" && s !== "Failed";
    replace(
      actions,
      h("h2", { id: "actions-h" }, "Actions"),
      h(
        "div",
        { class: "actions" },
        plainVerbs.filter((v) => v.from.includes(s)).map((v) => verb(capitalize(v.name), () => call((c) => c.instances.instanceVerb(iid, v.name)), v.summary)),
        s !== "Terminated" ? rm : null,
      ),
      s === "Running" || s === "Paused" ? h("p", { class: "hint" }, inst.retain ? "Stop keeps the writable layer on the node; start brings the files back, not the memory." : "Only an instance started with retain can stop; this one can be saved, then removed.") : null,
      live
        ? h("form", { class: "row", id: "renew-form" }, field("Renew TTL", renewTTL, "From now: 30m, 8h, or none."), verb("Renew", () => call((c) => c.instances.renew(iid, renewTTL.value.trim()))))
        : null,
      confirmBox,
    );
    // The save box keeps its progress and result; only whether it can save changes.
    const save = saveBox.querySelector<HTMLButtonElement>("#save-button");
    if (save && !save.hasAttribute("aria-busy")) save.disabled = inst.state !== "Running";
    saveBox.querySelector("#save-needs-running")?.toggleAttribute("hidden", inst.state === "Running");
  }

  function renderSave(): void {
    const msg = h("input", { id: "save-message", name: "message", autocomplete: "off", size: 30 });
    const steps = h("ol", { class: "steps", id: "save-steps" }, SAVE_STEPS.map((s) => h("li", { "data-step": s, id: `step-${s}` }, s)));
    const log = h("ol", { class: "events", id: "save-events", "aria-live": "polite" });
    const result = h("div", { id: "save-result" });
    const form = h(
      "form",
      { id: "save-form" },
      h("div", { class: "row" }, field("Message", msg), h("button", { type: "submit", class: "primary", id: "save-button", disabled: inst.state !== "Running" }, "Save")),
      steps,
      log,
      result,
    );
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const submit = form.querySelector<HTMLButtonElement>("button[type=submit]")!;
      submit.disabled = true;
      submit.setAttribute("aria-busy", "true");
      replace(log);
      replace(result);
      steps.querySelectorAll("li").forEach((li) => li.removeAttribute("class"));
      try {
        const op = await call((c) => c.instances.save(iid, { message: msg.value }));
        const done = await call((c) =>
          c.operations.wait<SaveResult>(op.id, {
            onEvent: (e) => {
              log.append(h("li", { "data-type": e.type }, h("strong", null, e.type), " ", e.message));
              const li = steps.querySelector(`[data-step="${e.type}"]`);
              if (li) {
                li.className = "done";
                li.setAttribute("aria-label", `${e.type}: done`);
              }
              if (e.type === "conflict") steps.querySelector('[data-step="committed"]')?.classList.add("conflict");
            },
          }),
        );
        if (done.state === "succeeded" && done.result) {
          const r = done.result;
          replace(
            result,
            r.conflict
              ? note("warn", h("span", { id: "save-outcome" }, `Saved as v${r.version}, not current: current moved from v${r.expected_current} meanwhile.`))
              : note("ok", h("span", { id: "save-outcome" }, `Saved as v${r.version}, now current.`), ` Layer ${bytes(r.layer_bytes)} (${r.compression}), ${r.entries} entries, frozen ${r.freeze_ms} ms, ${r.total_ms} ms in all. `, h("a", { href: `#/projects/${encodeURIComponent(r.project)}` }, "See the history")),
          );
          announce(`Saved as v${r.version}`);
        } else {
          replace(result, note("error", `Save ${done.state}: ${done.error?.code ?? ""} ${done.error?.message ?? ""}`));
        }
      } catch (e) {
        replace(result, errorBox(e, "Save"));
      } finally {
        submit.removeAttribute("aria-busy");
        await load().catch(() => {});
        submit.disabled = inst.state !== "Running";
      }
    });
    const needs = note("info", "Save needs a Running instance.");
    needs.id = "save-needs-running";
    needs.hidden = inst.state === "Running";
    replace(saveBox, h("h2", { id: "save-h" }, "Save"), needs, form);
  }

  function closeTerminal(): void {
    term?.close();
    term = undefined;
  }

  function renderTerminal(focus = false): void {
    closeTerminal();
    const host = h("div", { class: "terminal", id: "terminal" });
    const state = h("p", { id: "terminal-state", role: "status" });
    const reconnect = button("Reconnect", () => renderTerminal(true), { id: "terminal-reconnect" });
    replace(
      termBox,
      h("div", { class: "section-head" }, h("h2", { id: "term-h" }, "Terminal"), reconnect),
      h("p", { class: "hint" }, "A shell in the instance over the exec WebSocket. Tab and arrows go to the shell while it has focus; press Escape, then Tab, to leave it."),
      host,
      state,
    );
    if (closed) return;
    if (inst.state !== "Running") {
      state.textContent = `The terminal needs a Running instance (this one is ${inst.state}).`;
      return;
    }
    term = openTerminal(host, iid, (s) => (state.textContent = s), focus);
  }

  await load();
  renderSave();
  renderTerminal();
  return () => {
    closed = true;
    closeTerminal();
  };
}

function limitsText(l: NonNullable<Instance["limits"]>): string {
  const parts: string[] = [];
  if (l.memory_bytes) parts.push(`memory ${bytes(l.memory_bytes)}`);
  if (l.pids) parts.push(`pids ${l.pids}`);
  if (l.cpus) parts.push(`cpus ${l.cpus}`);
  if (l.disk_bytes) parts.push(`disk ${bytes(l.disk_bytes)}`);
  return parts.join(", ") || "node defaults";
}
