// Ports the instance listens on, with preview links: a preview token per
// port (POST .../ports/{port}/token) whose URL opens the port on the
// node's preview domain in a new tab.

import { h, replace, button } from "./dom.js";
import { call } from "./session.js";
import { time } from "./format.js";
import { errorBox, note, pageTitle, table } from "./ui.js";
import { instanceTabs } from "./instances.js";
import { listPorts, previewUrl } from "./sdkext.js";

export async function portsPage(main: HTMLElement, [id]: string[]): Promise<void> {
  const iid = id!;
  const flash = h("div", { id: "ports-flash", "aria-live": "polite" });
  const box = h("section", { class: "card", "aria-labelledby": "ports-h" });
  replace(main, pageTitle(`Ports of ${iid}`), instanceTabs(iid, "ports"), flash, box);

  const load = async () => {
    let ports;
    try {
      ports = await call((c) => listPorts(c, iid));
    } catch (e) {
      replace(box, h("h2", { id: "ports-h" }, "Listening ports"), errorBox(e, "List ports"));
      return;
    }
    const rows = ports.map((p) => {
      const cell = h("span");
      const open = button(`Preview link for port ${p.port}`, async () => {
        try {
          const t = await call((c) => previewUrl(c, iid, p.port));
          if (t.url) {
            replace(cell, h("a", { href: t.url, target: "_blank", rel: "noopener noreferrer", class: "preview-link" }, `Open port ${p.port}`), h("small", null, ` (valid until ${time(t.expires_at)})`));
          } else {
            replace(cell, note("info", "This node has no preview domain (envd --preview-domain): reach the port with envctl port-forward."));
          }
        } catch (e) {
          replace(cell, errorBox(e, "Preview"));
        }
      });
      return [String(p.port), `${p.address} (${p.protocol})`, p.public ? "public" : "token", p.url ? h("span", null, open, " ", cell) : h("span", null, open, " ", cell)];
    });
    replace(
      box,
      h("div", { class: "section-head" }, h("h2", { id: "ports-h" }, "Listening ports"), button("Refresh", () => load(), { id: "ports-refresh" })),
      h("p", { class: "hint" }, "TCP ports in LISTEN state inside the instance. A preview link carries a token for one port that expires; public ports need none."),
      table("Listening ports", ["Port", "Address", "Access", "Preview"], rows, { id: "ports-table" }),
    );
  };
  await load();
}
