// Secrets: the tenant's brokered secrets (an admin token of the tenant):
// create or rotate a value, bind it to a host (HTTP or HTTPS), unbind,
// revoke. Values are write-only: the page never shows one back, and the
// value field is emptied once sent.

import type { Secret, SecretBinding } from "../../sdk/typescript/src/index.js";
import { h, replace, field, button } from "./dom.js";
import { call } from "./session.js";
import { time } from "./format.js";
import { errorBox, note, pageTitle, table, announce } from "./ui.js";

export async function secretsPage(main: HTMLElement): Promise<void> {
  const flash = h("div", { id: "secrets-flash", "aria-live": "polite" });
  const listBox = h("section", { class: "card", "aria-labelledby": "secrets-h" });
  const setBox = h("section", { class: "card", "aria-labelledby": "secret-set-h" });
  const bindBox = h("section", { class: "card", "aria-labelledby": "secret-bind-h" });
  replace(main, pageTitle("Secrets"), flash, listBox, setBox, bindBox);

  const names = h("datalist", { id: "secret-names" });
  const load = async (): Promise<boolean> => {
    let secrets: Secret[];
    try {
      secrets = await call((c) => c.secrets.list());
    } catch (e) {
      replace(listBox, h("h2", { id: "secrets-h" }, "Secrets"), errorBox(e, "The secret store needs an admin token of the tenant"));
      return false;
    }
    replace(names, secrets.map((s) => h("option", { value: s.name })));
    const rows = secrets.map((s) => [
      s.name,
      s.binding ? s.binding.scheme || "http" : "-",
      s.binding ? s.binding.host : "not bound",
      s.binding ? `${s.binding.header}: ${s.binding.format}` : "-",
      time(s.updated_at),
      h(
        "span",
        { class: "actions" },
        s.binding
          ? button(`Unbind ${s.name}`, () => act(`Secret ${s.name} unbound.`, () => call((c) => c.secrets.bind(s.name, { host: "" }))), { class: "small", id: `secret-unbind-${s.name}` })
          : null,
        button(`Revoke ${s.name}`, () => act(`Secret ${s.name} revoked: requests from now on go without it.`, () => call((c) => c.secrets.delete(s.name))), {
          class: "small danger",
          id: `secret-revoke-${s.name}`,
        }),
      ),
    ]);
    replace(
      listBox,
      h("h2", { id: "secrets-h" }, "Secrets"),
      h("p", null, "The node's egress proxy adds a bound secret as a header to the requests of the tenant's instances to its host; the instances never hold the value. Values are never shown back."),
      table("Secrets (never their values)", ["Name", "Scheme", "Host", "Header", "Updated", ""], rows, { id: "secrets-table" }),
    );
    return true;
  };

  const act = async (done: string, f: () => Promise<unknown>) => {
    try {
      await f();
      announce(done);
      replace(flash, note("ok", done));
    } catch (e) {
      replace(flash, errorBox(e));
    }
    await load();
  };

  // Create or rotate: the value goes once, and the field is emptied.
  const setName = h("input", { id: "secret-name", autocomplete: "off", required: true, list: "secret-names", spellcheck: "false" });
  const setValue = h("input", { id: "secret-value", type: "password", autocomplete: "off", required: true, spellcheck: "false" });
  const setForm = h(
    "form",
    { id: "secret-set-form" },
    h("div", { class: "row" }, field("Name", setName, "A new name creates a secret; an existing one rotates its value."), field("Value", setValue, "Sent once; never shown again.")),
    h("button", { type: "submit", class: "primary" }, "Save secret"),
  );
  setForm.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const name = setName.value.trim();
    const value = setValue.value;
    setValue.value = "";
    await act(`Secret ${name} saved.`, () => call((c) => c.secrets.set(name, value)));
  });
  replace(setBox, h("h2", { id: "secret-set-h" }, "Create or rotate a secret"), setForm, names);

  // Bind to a host.
  const bindName = h("input", { id: "bind-name", autocomplete: "off", required: true, list: "secret-names", spellcheck: "false" });
  const bindHost = h("input", { id: "bind-host", autocomplete: "off", required: true, spellcheck: "false", placeholder: "api.example.org" });
  const bindScheme = h("select", { id: "bind-scheme" }, h("option", { value: "https" }, "https"), h("option", { value: "http" }, "http"));
  const bindHeader = h("input", { id: "bind-header", autocomplete: "off", spellcheck: "false", placeholder: "Authorization" });
  const bindFormat = h("input", { id: "bind-format", autocomplete: "off", spellcheck: "false", placeholder: "Bearer {{value}}" });
  const bindForm = h(
    "form",
    { id: "secret-bind-form" },
    h(
      "div",
      { class: "row" },
      field("Secret", bindName),
      field("Host", bindHost, "A host name or *.domain the project's egress allows."),
      field("Scheme", bindScheme, "https: the node terminates TLS for this host (instances trust its egress CA); http: plain HTTP only."),
      field("Header", bindHeader, "Default Authorization."),
      field("Format", bindFormat, "{{value}} stands for the secret; default Bearer {{value}}."),
    ),
    h("button", { type: "submit" }, "Bind"),
  );
  bindForm.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const name = bindName.value.trim();
    const b: SecretBinding = { host: bindHost.value.trim(), scheme: bindScheme.value as SecretBinding["scheme"] };
    if (bindHeader.value.trim()) b.header = bindHeader.value.trim();
    if (bindFormat.value.trim()) b.format = bindFormat.value.trim();
    await act(`Secret ${name} bound to ${b.scheme}://${b.host}.`, () => call((c) => c.secrets.bind(name, b)));
  });
  replace(bindBox, h("h2", { id: "secret-bind-h" }, "Bind a secret to a host"), bindForm);

  await load();
}
