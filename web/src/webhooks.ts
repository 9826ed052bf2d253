// Webhooks: the tenant's webhooks (register, list, test, remove) and each
// one's delivery log. A hook's signing secret is shown once, when it is
// registered. While a delivery shown is pending, the log refreshes itself
// every second.

import type { Webhook, WebhookDelivery } from "../../sdk/typescript/src/index.js";
import { h, replace, field, button } from "./dom.js";
import { call } from "./session.js";
import { time } from "./format.js";
import { errorBox, note, pageTitle, table, announce } from "./ui.js";

export async function webhooksPage(main: HTMLElement): Promise<() => void> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  let gone = false;
  const flash = h("div", { id: "webhooks-flash", "aria-live": "polite" });
  const listBox = h("section", { class: "card", "aria-labelledby": "webhooks-h" });
  const newBox = h("section", { class: "card", "aria-labelledby": "webhook-new-h" });
  const logBox = h("section", { class: "card", "aria-labelledby": "deliveries-h", id: "deliveries" });
  replace(main, pageTitle("Webhooks"), flash, listBox, newBox, logBox);

  const showLog = async (hook: Webhook) => {
    clearTimeout(timer);
    if (gone) return;
    let ds: WebhookDelivery[];
    try {
      ds = await call((c) => c.webhooks.deliveries(hook.id));
    } catch (e) {
      replace(logBox, h("h2", { id: "deliveries-h" }, "Deliveries"), errorBox(e));
      return;
    }
    const rows = ds.map((d) => {
      const ev = d.event as unknown as { type?: string; message?: string };
      return [
        String(d.id),
        ev.type ?? "",
        h("span", { class: `badge delivery-${d.state}` }, d.state),
        String(d.attempts),
        d.response_code ? String(d.response_code) : "-",
        d.last_error ?? "",
        time(d.finished_at ?? d.created_at),
      ];
    });
    replace(
      logBox,
      h("h2", { id: "deliveries-h" }, `Deliveries of ${hook.id}`),
      button("Refresh", () => showLog(hook), { class: "small", id: "deliveries-refresh" }),
      table(`Deliveries of ${hook.url}, newest first`, ["Id", "Event", "State", "Attempts", "Answer", "Last error", "Time"], rows, { id: "deliveries-table" }),
    );
    if (ds.some((d) => d.state === "pending")) timer = setTimeout(() => void showLog(hook), 1000);
  };

  const load = async () => {
    let hooks: Webhook[];
    try {
      hooks = await call((c) => c.webhooks.list());
    } catch (e) {
      replace(listBox, h("h2", { id: "webhooks-h" }, "Webhooks"), errorBox(e));
      return;
    }
    const rows = hooks.map((w) => [
      w.id,
      w.url,
      w.events.join(", ") || "*",
      w.description ?? "",
      time(w.created_at),
      h(
        "span",
        { class: "actions" },
        button(`Deliveries of ${w.id}`, () => showLog(w), { class: "small", id: `webhook-log-${w.id}` }),
        button(`Test ${w.id}`, async () => {
          try {
            await call((c) => c.webhooks.test(w.id));
            replace(flash, note("ok", `A webhook.test event was queued for ${w.id}.`));
          } catch (e) {
            replace(flash, errorBox(e, "Test"));
          }
          await showLog(w);
        }, { class: "small", id: `webhook-test-${w.id}` }),
        button(`Remove ${w.id}`, async () => {
          try {
            await call((c) => c.webhooks.remove(w.id));
            announce(`Webhook ${w.id} removed`);
            replace(flash, note("ok", `Webhook ${w.id} removed, with its delivery log.`));
            clearTimeout(timer);
            replace(logBox);
          } catch (e) {
            replace(flash, errorBox(e, "Remove"));
          }
          await load();
        }, { class: "small danger", id: `webhook-remove-${w.id}` }),
      ),
    ]);
    replace(listBox, h("h2", { id: "webhooks-h" }, "Webhooks"), table("Webhooks (never their secrets)", ["Id", "URL", "Events", "Description", "Created", ""], rows, { id: "webhooks-table" }));
  };

  const url = h("input", { id: "webhook-url", type: "url", autocomplete: "off", required: true, spellcheck: "false", placeholder: "https://hooks.example/envd" });
  const events = h("input", { id: "webhook-events", autocomplete: "off", spellcheck: "false", placeholder: "*" });
  const description = h("input", { id: "webhook-description", autocomplete: "off" });
  const out = h("div", { id: "webhook-created" });
  const form = h(
    "form",
    { id: "webhook-form" },
    h(
      "div",
      { class: "row" },
      field("URL", url, "http:// or https://, where the node POSTs signed events."),
      field("Events", events, "Comma-separated: instance.state, operation.<kind>, quota.refused, rollout.step, family.*; empty: all."),
      field("Description", description),
    ),
    h("button", { type: "submit", class: "primary" }, "Register webhook"),
    out,
  );
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const evs = events.value.split(",").map((s) => s.trim()).filter(Boolean);
    try {
      const w = await call((c) => c.webhooks.create({ url: url.value.trim(), events: evs.length ? evs : undefined, description: description.value.trim() || undefined }));
      const shown = h("input", { readonly: true, id: "new-webhook-secret", size: 50 });
      shown.value = w.secret ?? "";
      await load();
      replace(out, note("ok", h("p", null, `Webhook ${w.id} registered. Its signing secret is shown only now: copy it.`), field("Signing secret", shown)));
    } catch (e) {
      replace(out, errorBox(e, "Register webhook"));
    }
  });
  replace(newBox, h("h2", { id: "webhook-new-h" }, "Register a webhook"), form);

  await load();
  return () => {
    gone = true;
    clearTimeout(timer);
  };
}
