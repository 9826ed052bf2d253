// Builds from the console: a Dockerfile (run by the node's BuildKit, its RUN
// steps under the project's egress) or envd's own spec (packages), as a
// build operation whose events show as they come and whose log (BuildKit's
// output, or the package manager's) shows when it ends. The result is a new
// version of the project, current if asked and current had not moved.
// devcontainer.json is translated by envctl on the user's machine (it reads
// the folder and its features), so it is not offered here.

import { type BuildRequest, type BuildResult, type OperationEvent } from "../../sdk/typescript/src/index.js";
import { h, replace, field } from "./dom.js";
import { call, SignedOut } from "./session.js";
import { errorBox, note, announce } from "./ui.js";

export function buildForm(project: string, onBuilt: () => Promise<void>): HTMLElement {
  const kind = h("select", { id: "build-kind" }, h("option", { value: "dockerfile" }, "Dockerfile"), h("option", { value: "spec" }, "envd spec (packages)"));
  const dockerfile = h("textarea", { id: "build-dockerfile", rows: 8, spellcheck: "false", wrap: "off" });
  const packages = h("input", { id: "build-packages", size: 40, autocomplete: "off", placeholder: "graphviz git" });
  const makeCurrent = h("input", { id: "build-switch", type: "checkbox" });
  const events = h("ol", { id: "build-events", class: "events" });
  const log = h("pre", { id: "build-log", class: "log" });
  const out = h("div", { id: "build-result", "aria-live": "polite" });
  const submit = h("button", { type: "submit", id: "build-submit" }, "Build");
  const dockerfileField = field("Dockerfile", dockerfile, "FROM names an image imported on the node or an earlier stage; the build context is empty.");
  const packagesField = field("Packages", packages, "Installed with the base's package manager, on the project's first version.");
  const shown = () => {
    dockerfileField.hidden = kind.value !== "dockerfile";
    packagesField.hidden = kind.value !== "spec";
  };
  kind.addEventListener("change", shown);
  shown();
  const form = h(
    "form",
    { id: "build-form" },
    field("Kind", kind),
    dockerfileField,
    packagesField,
    h("div", { class: "field check" }, makeCurrent, h("label", { for: "build-switch" }, "Make the new version current")),
    submit,
    out,
    events,
    log,
  );
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    if (submit.disabled) return;
    submit.disabled = true;
    replace(out);
    replace(events);
    log.textContent = "";
    const req: BuildRequest =
      kind.value === "dockerfile"
        ? { dockerfile: { content: dockerfile.value }, switch: makeCurrent.checked || undefined }
        : { packages: packages.value.split(/\s+/).filter(Boolean), switch: makeCurrent.checked || undefined };
    let opID = "";
    try {
      const op = await call((c) => c.builds.create(project, req));
      opID = op.id;
      const r = await call((c) =>
        c.operations.result<BuildResult>(op.id, { onEvent: (e: OperationEvent) => events.append(h("li", null, h("strong", null, e.type), " ", e.message ?? "")) }),
      );
      replace(
        out,
        note(
          "ok",
          h("span", { id: "build-message" }, `Built v${r.version}${r.cached ? " (an earlier build with the same key, reused)" : ""}${r.current ? "; it is now current" : ""}${r.conflict ? "; not made current: current moved meanwhile" : ""}.`),
        ),
      );
      announce(`Built v${r.version}`);
      await onBuilt();
    } catch (e) {
      if (!(e instanceof SignedOut)) replace(out, errorBox(e, "Build"));
    } finally {
      submit.disabled = false;
    }
    if (opID) {
      // The log says why a step failed; the end of a long one is enough.
      const text = await call((c) => c.operationLogs(opID)).catch(() => "");
      log.textContent = text.length > 20000 ? "…" + text.slice(-20000) : text;
    }
  });
  return h("section", { class: "card", "aria-labelledby": "build-h", id: "build" }, h("h2", { id: "build-h" }, "Build a version"), form);
}
