// Shared pieces of the pages: the status line, error boxes, headings.

import { EnvdError } from "../../sdk/typescript/src/index.js";
import { h, type Child } from "./dom.js";
import { SignedOut } from "./session.js";

/** The polite live region in the header: what just happened. */
export function announce(text: string): void {
  const el = document.getElementById("status");
  if (el) el.textContent = text;
}

/** A box saying what went wrong, with the error's code; nothing for a sign-out. */
export function errorBox(e: unknown, what = ""): HTMLElement {
  if (e instanceof SignedOut) return h("span");
  const prefix = what ? `${what}: ` : "";
  if (e instanceof EnvdError) {
    return h("div", { class: "alert error", role: "alert" }, h("strong", null, `${prefix}${e.code}`), " ", e.message, e.requestId ? h("small", null, ` (request ${e.requestId})`) : null);
  }
  return h("div", { class: "alert error", role: "alert" }, prefix, e instanceof Error ? e.message : String(e));
}

export function note(kind: "info" | "ok" | "warn" | "error", ...children: Child[]): HTMLElement {
  return h("div", { class: `alert ${kind}`, role: kind === "error" || kind === "warn" ? "alert" : "status" }, children);
}

/** A definition list of label/value rows. */
export function details(rows: [string, Child][]): HTMLElement {
  return h("dl", { class: "details" }, rows.map(([k, v]) => [h("dt", null, k), h("dd", null, v === "" || v === undefined || v === null ? "-" : v)]));
}

export function pageTitle(text: string, ...extra: Child[]): HTMLElement {
  document.title = `${text} · envd console`;
  return h("div", { class: "page-head" }, h("h1", { id: "page-title", tabindex: "-1" }, text), extra);
}

export function stateBadge(state: string): HTMLElement {
  return h("span", { class: `badge state-${state.toLowerCase()}` }, state);
}

/** A table with a caption (read by screen readers) that scrolls sideways on a narrow window. */
export function table(caption: string, head: string[], rows: Child[][], attrs: Record<string, string> = {}): HTMLElement {
  return h(
    "div",
    { class: "table-wrap", tabindex: "0", role: "region", "aria-label": caption },
    h(
      "table",
      attrs,
      h("caption", null, caption),
      h("thead", null, h("tr", null, head.map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", null, rows.length ? rows.map((r) => h("tr", null, r.map((c) => h("td", null, c)))) : h("tr", null, h("td", { colspan: head.length }, "None."))),
    ),
  );
}
