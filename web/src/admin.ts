// Admin: tenants (as their tokens name them), tokens (create, revoke),
// quotas and usage, GC with a dry run, and the cluster's nodes when the
// node serves GET /v1/nodes.

import type { GCResult, Quota, TokenInfo, Usage } from "../../sdk/typescript/src/index.js";
import { h, replace, field, button } from "./dom.js";
import { call } from "./session.js";
import { bytes, time, relative } from "./format.js";
import { errorBox, note, pageTitle, table, announce } from "./ui.js";
import { listNodes } from "./sdkext.js";

export async function adminPage(main: HTMLElement): Promise<void> {
  const flash = h("div", { id: "admin-flash", "aria-live": "polite" });
  const tenantsBox = h("section", { class: "card", "aria-labelledby": "tenants-h" });
  const tokensBox = h("section", { class: "card", "aria-labelledby": "tokens-h" });
  const gcBox = h("section", { class: "card", "aria-labelledby": "gc-h" });
  const nodesBox = h("section", { class: "card", "aria-labelledby": "nodes-h" });
  replace(main, pageTitle("Admin"), flash, tenantsBox, tokensBox, gcBox, nodesBox);

  let tokens: TokenInfo[];
  try {
    tokens = await call((c) => c.tokens.list());
  } catch (e) {
    replace(flash, errorBox(e, "The admin pages need an admin token"));
    return;
  }

  const loadTenants = async () => {
    const names = [...new Set(tokens.map((t) => t.tenant))].sort();
    const usages = await Promise.all(names.map((n) => call((c) => c.tenants.usage(n)).catch((e) => e as Error)));
    const rows = names.map((n, i) => {
      const u = usages[i];
      if (u instanceof Error) return [n, errorBox(u), "", "", ""];
      const us = u as Usage;
      const q = us.quota;
      return [
        n,
        `${us.instances}${q.max_instances ? " of " + q.max_instances : ""}`,
        `${bytes(us.stored_bytes)}${q.max_stored_bytes ? " of " + bytes(q.max_stored_bytes) : ""}`,
        Object.entries(us.versions ?? {}).map(([p, k]) => `${p}: ${k}`).join(", ") || "-",
        quotaText(q),
      ];
    });
    const tenant = h("select", { id: "quota-tenant" }, names.map((n) => h("option", { value: n }, n)));
    const maxInst = h("input", { id: "quota-instances", inputmode: "numeric", size: 6, autocomplete: "off" });
    const maxStored = h("input", { id: "quota-stored", inputmode: "numeric", size: 12, autocomplete: "off" });
    const maxTTL = h("input", { id: "quota-ttl", size: 6, autocomplete: "off" });
    const form = h(
      "form",
      { id: "quota-form" },
      h("h3", null, "Set a quota"),
      h("div", { class: "row" }, field("Tenant", tenant), field("Max instances", maxInst, "0 or empty: no limit."), field("Max stored bytes", maxStored, "Bytes, e.g. 21474836480."), field("Max TTL", maxTTL, "A Go duration, e.g. 24h.")),
      h("button", { type: "submit" }, "Set quota"),
    );
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const q: Quota = {};
      if (maxInst.value) q.max_instances = Number(maxInst.value);
      if (maxStored.value) q.max_stored_bytes = Number(maxStored.value);
      if (maxTTL.value) q.max_ttl = maxTTL.value.trim();
      try {
        await call((c) => c.tenants.setQuota(tenant.value, q));
        replace(flash, note("ok", `Quota of ${tenant.value} set: ${quotaText(q)}.`));
        await loadTenants();
      } catch (e) {
        replace(flash, errorBox(e, "Set quota"));
      }
    });
    replace(tenantsBox, h("h2", { id: "tenants-h" }, "Tenants, usage and quotas"), table("Tenants", ["Tenant", "Instances", "Stored", "Versions", "Quota"], rows, { id: "tenants-table" }), form);
  };

  const loadTokens = async () => {
    tokens = await call((c) => c.tokens.list());
    const rows = tokens.map((t) => [
      String(t.id),
      t.tenant,
      t.admin ? "admin" : "tenant",
      time(t.created_at),
      t.expires_at ? `${time(t.expires_at)} (${relative(t.expires_at)})` : "never",
      t.revoked_at ? `revoked ${time(t.revoked_at)}` : t.last_used_at ? `used ${relative(t.last_used_at)}` : "unused",
      t.revoked_at ? "" : button(`Revoke token ${t.id}`, async () => {
        try {
          await call((c) => c.tokens.revoke(t.id));
          announce(`Token ${t.id} revoked`);
          replace(flash, note("ok", `Token ${t.id} of ${t.tenant} revoked.`));
        } catch (e) {
          replace(flash, errorBox(e, "Revoke"));
        }
        await loadTokens();
      }, { class: "small danger" }),
    ]);
    const tenant = h("input", { id: "token-tenant", autocomplete: "off", required: true });
    const expires = h("input", { id: "token-expires", size: 8, autocomplete: "off", placeholder: "never" });
    const admin = h("input", { id: "token-admin", type: "checkbox" });
    const out = h("div", { id: "token-created" });
    const form = h(
      "form",
      { id: "token-form" },
      h("h3", null, "Create a token"),
      h("div", { class: "row" }, field("Tenant", tenant, "A new name makes a new tenant."), field("Expires in", expires, "A Go duration (720h); empty: never."), h("div", { class: "field check" }, admin, h("label", { for: "token-admin" }, "Admin token"))),
      h("button", { type: "submit" }, "Create token"),
      out,
    );
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      try {
        const t = await call((c) => c.tokens.create(tenant.value.trim(), { admin: admin.checked || undefined, expires_in: expires.value.trim() || undefined }));
        const shown = h("input", { readonly: true, id: "new-token-value", size: 50 });
        shown.value = t.token;
        await loadTokens();
        await loadTenants();
        replace(tokensBox.querySelector("#token-created")!, note("ok", h("p", null, `Token ${t.id} for ${t.tenant}. It is shown only now: copy it.`), field("New token", shown)));
      } catch (e) {
        replace(out, errorBox(e, "Create token"));
      }
    });
    replace(tokensBox, h("h2", { id: "tokens-h" }, "Tokens"), table("Tokens (never the secrets)", ["Id", "Tenant", "Kind", "Created", "Expires", "Use", ""], rows, { id: "tokens-table" }), form);
  };

  const renderGC = () => {
    const dry = h("input", { id: "gc-dry-run", type: "checkbox", checked: true });
    const log = h("ol", { class: "events", id: "gc-events", "aria-live": "polite" });
    const out = h("div", { id: "gc-result" });
    const form = h("form", { id: "gc-form" }, h("div", { class: "field check" }, dry, h("label", { for: "gc-dry-run" }, "Dry run (report what would be deleted, delete nothing)")), h("button", { type: "submit" }, "Run GC"), log, out);
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const submit = form.querySelector<HTMLButtonElement>("button[type=submit]")!;
      submit.disabled = true;
      replace(log);
      replace(out);
      try {
        const op = await call((c) => c.gc({ dry_run: dry.checked }));
        const r = await call((c) => c.operations.result<GCResult>(op.id, { onEvent: (e) => log.append(h("li", null, h("strong", null, e.type), " ", e.message)) }));
        const vs = r.versions ?? [];
        replace(
          out,
          note("ok", h("p", { id: "gc-summary" }, `${r.dry_run ? "Dry run: would delete" : "Deleted"} ${vs.length} version(s)`, r.swept ? `; blobs ${r.blobs_before} → ${r.blobs_after}, ${bytes(r.bytes_before)} → ${bytes(r.bytes_after)}` : "", r.note ? `. ${r.note}` : ".")),
          vs.length ? table("Versions collected", ["Tenant", "Project", "Version", "Size"], vs.map((v) => [v.tenant, v.project, `v${v.version}`, bytes(v.size_bytes)])) : null,
        );
      } catch (e) {
        replace(out, errorBox(e, "GC"));
      } finally {
        submit.disabled = false;
      }
    });
    replace(gcBox, h("h2", { id: "gc-h" }, "Garbage collection"), h("p", { class: "hint" }, "Deletes versions the retention policies do not keep (never current, pinned or in-use ones), then unreferenced registry blobs."), form);
  };

  const loadNodes = async () => {
    try {
      const nodes = await call((c) => listNodes(c));
      if (!nodes) {
        replace(nodesBox, h("h2", { id: "nodes-h" }, "Nodes"), note("info", h("span", { id: "nodes-na" }, "Not available: this node does not list the cluster's nodes (GET /v1/nodes).")));
        return;
      }
      replace(
        nodesBox,
        h("h2", { id: "nodes-h" }, "Nodes"),
        table("Nodes", ["Node", "State", "API", "Instances", "Lease expires", "Labels"], nodes.map((n) => [n.name, n.state, n.api_url ?? "", String(n.instances ?? ""), time(n.lease_expires_at), Object.entries(n.labels ?? {}).map(([k, v]) => `${k}=${v}`).join(", ")]), { id: "nodes-table" }),
      );
    } catch (e) {
      replace(nodesBox, h("h2", { id: "nodes-h" }, "Nodes"), errorBox(e, "Nodes"));
    }
  };

  await Promise.all([loadTenants(), loadTokens(), loadNodes()]);
  renderGC();
}

function quotaText(q: Quota): string {
  const parts: string[] = [];
  if (q.max_instances) parts.push(`${q.max_instances} instances`);
  if (q.max_versions) parts.push(`${q.max_versions} versions`);
  if (q.max_stored_bytes) parts.push(`${bytes(q.max_stored_bytes)} stored`);
  if (q.max_ttl) parts.push(`TTL ${q.max_ttl}`);
  return parts.join(", ") || "no limits";
}
