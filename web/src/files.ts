// A file browser and editor over the file API: list a directory, open a
// file in a text area, save it (an atomic write), make a file or a
// directory, delete.

import { h, replace, field, button } from "./dom.js";
import { call } from "./session.js";
import { bytes, time } from "./format.js";
import { errorBox, note, pageTitle, announce } from "./ui.js";
import { instanceTabs } from "./instances.js";
import { listFiles, readText, writeFile, mkdir, removeFile, type FileInfo } from "./sdkext.js";

const MAX_EDIT = 2 << 20;

export async function filesPage(main: HTMLElement, [id]: string[]): Promise<void> {
  const iid = id!;
  const flash = h("div", { id: "files-flash", "aria-live": "polite" });
  const listing = h("section", { class: "card", "aria-labelledby": "dir-h" });
  const editor = h("section", { class: "card", "aria-labelledby": "editor-h", id: "editor" });
  replace(main, pageTitle(`Files of ${iid}`), instanceTabs(iid, "files"), flash, listing, editor);

  const pathInput = h("input", { id: "files-path", value: "/", autocomplete: "off", spellcheck: "false" });
  const join = (dir: string, name: string) => (dir.endsWith("/") ? dir : dir + "/") + name;
  const parent = (p: string) => p.replace(/\/[^/]+\/?$/, "") || "/";

  async function openDir(dir: string): Promise<void> {
    replace(flash);
    let list;
    try {
      list = await call((c) => listFiles(c, iid, dir));
    } catch (e) {
      replace(flash, errorBox(e, `List ${dir}`));
      return;
    }
    pathInput.value = list.path;
    const entries = [...list.entries].sort((a, b) => (a.type === "dir" ? 0 : 1) - (b.type === "dir" ? 0 : 1) || a.name.localeCompare(b.name));
    const row = (f: FileInfo) =>
      h(
        "tr",
        null,
        h("td", null, f.type === "dir" ? button(`${f.name}/`, () => openDir(f.path), { class: "link", "data-path": f.path }) : f.type === "file" ? button(f.name, () => openFile(f.path), { class: "link", "data-path": f.path }) : `${f.name}${f.link_target ? " → " + f.link_target : ""}`),
        h("td", null, f.type),
        h("td", { class: "num" }, f.type === "file" ? bytes(f.size) : ""),
        h("td", null, f.mode),
        h("td", null, time(f.mtime)),
        h("td", null, list.read_only ? "" : deleteButton(f)),
      );
    const newName = h("input", { id: "new-file-name", autocomplete: "off", spellcheck: "false" });
    const go = h("form", { class: "row", id: "files-go" }, field("Path", pathInput), h("button", { type: "submit" }, "Open"));
    go.addEventListener("submit", (ev) => {
      ev.preventDefault();
      void openDir(pathInput.value.trim() || "/");
    });
    const create = h(
      "form",
      { class: "row", id: "files-new" },
      field("New file or directory (end with /)", newName),
      h("button", { type: "submit" }, "Create"),
    );
    create.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const n = newName.value.trim();
      if (!n) return;
      const target = n.startsWith("/") ? n : join(list.path, n);
      try {
        if (target.endsWith("/")) {
          await call((c) => mkdir(c, iid, target.replace(/\/+$/, "")));
          await openDir(list.path);
        } else {
          editFile(target, "", true);
        }
      } catch (e) {
        replace(flash, errorBox(e, "Create"));
      }
    });
    replace(
      listing,
      h("h2", { id: "dir-h" }, `Directory ${list.path}`),
      go,
      list.read_only ? note("info", "The instance is stopped: its files are shown read-only.") : null,
      h(
        "div",
        { class: "table-wrap", tabindex: "0", role: "region", "aria-label": `Files in ${list.path}` },
        h(
          "table",
          { id: "files-table" },
          h("caption", null, `Files in ${list.path}`),
          h("thead", null, h("tr", null, ["Name", "Type", "Size", "Mode", "Modified", ""].map((c) => h("th", { scope: "col" }, c)))),
          h("tbody", null, list.path !== "/" ? h("tr", null, h("td", { colspan: 6 }, button("../ (parent)", () => openDir(parent(list.path)), { class: "link", id: "files-up" }))) : null, entries.map(row)),
        ),
      ),
      list.read_only ? null : create,
    );
  }

  // Two steps: the first press asks (a directory goes with everything in it).
  function deleteButton(f: FileInfo): HTMLButtonElement {
    let armed = false;
    const b = h("button", { type: "button", class: "small danger", "aria-label": `Delete ${f.path}`, "data-delete": f.path }, `Delete ${f.name}`);
    b.addEventListener("click", async () => {
      if (!armed) {
        armed = true;
        b.textContent = f.type === "dir" ? `Delete ${f.name}/ and all in it? Press again` : `Delete ${f.name}? Press again`;
        b.setAttribute("aria-label", b.textContent);
        announce(b.textContent);
        return;
      }
      armed = false;
      await del(f);
    });
    b.addEventListener("blur", () => {
      if (!armed) return;
      armed = false;
      b.textContent = `Delete ${f.name}`;
      b.setAttribute("aria-label", `Delete ${f.path}`);
    });
    return b;
  }

  async function del(f: FileInfo): Promise<void> {
    try {
      await call((c) => removeFile(c, iid, f.path, f.type === "dir"));
      announce(`Deleted ${f.path}`);
      replace(flash, note("ok", `Deleted ${f.path}.`));
    } catch (e) {
      replace(flash, errorBox(e, `Delete ${f.path}`));
    }
    await openDir(parent(f.path));
  }

  async function openFile(path: string): Promise<void> {
    const info = (await call((c) => listFiles(c, iid, parent(path))).catch(() => undefined))?.entries.find((e) => e.path === path);
    if (info && info.size > MAX_EDIT) {
      replace(editor, h("h2", { id: "editor-h" }, path), note("info", `${bytes(info.size)}: too large to edit here (envctl cp INSTANCE:${path} FILE).`));
      return;
    }
    try {
      editFile(path, await call((c) => readText(c, iid, path)), false);
    } catch (e) {
      replace(flash, errorBox(e, `Read ${path}`));
    }
  }

  function editFile(path: string, text: string, isNew: boolean): void {
    const area = h("textarea", { id: "editor-text", rows: 16, spellcheck: "false", wrap: "off" });
    area.value = text;
    const out = h("div", { id: "editor-result", "aria-live": "polite" });
    const form = h("form", { id: "editor-form" }, field(`Content of ${path}`, area), h("div", { class: "actions" }, h("button", { type: "submit", class: "primary", id: "editor-save" }, isNew ? "Create file" : "Save file"), button("Reload", () => openFile(path), { id: "editor-reload", disabled: isNew })), out);
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      try {
        const fi = await call((c) => writeFile(c, iid, path, area.value));
        replace(out, note("ok", h("span", { id: "editor-saved" }, `Wrote ${fi.path}: ${bytes(fi.size)}, mode ${fi.mode}.`)));
        announce(`Wrote ${fi.path}`);
        await openDir(parent(path));
      } catch (e) {
        replace(out, errorBox(e, `Write ${path}`));
      }
    });
    replace(editor, h("h2", { id: "editor-h" }, isNew ? `New file ${path}` : `File ${path}`), form);
    area.focus();
  }

  replace(editor, h("h2", { id: "editor-h" }, "Editor"), h("p", { class: "hint" }, "Open a file from the list, or create one."));
  await openDir("/");
}
