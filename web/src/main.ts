// envd's web console: a hash-routed page over the TypeScript SDK.
// Routes: #/signin, #/projects, #/projects/P, #/instances, #/instances/I,
// #/instances/I/files, #/instances/I/ports, #/admin, #/secrets, #/webhooks.

import "@xterm/xterm/css/xterm.css";
import "./style.css";

import { h, replace, field } from "./dom.js";
import { session, setSignedOutHandler, signIn, signOut, storedToken, SignedOut } from "./session.js";
import { errorBox, note, pageTitle, announce } from "./ui.js";
import { projectsPage } from "./projects.js";
import { projectPage } from "./project.js";
import { instancesPage, instancePage } from "./instances.js";
import { filesPage } from "./files.js";
import { portsPage } from "./ports.js";
import { adminPage } from "./admin.js";
import { secretsPage } from "./secrets.js";
import { webhooksPage } from "./webhooks.js";

/** What a page leaves behind when the route changes (timers, sockets). */
export type Cleanup = () => void;
export interface Page {
  (main: HTMLElement, params: string[]): Promise<Cleanup | void> | Cleanup | void;
}

const routes: [RegExp, Page][] = [
  [/^\/projects$/, projectsPage],
  [/^\/projects\/([^/]+)$/, projectPage],
  [/^\/instances$/, instancesPage],
  [/^\/instances\/([^/]+)$/, instancePage],
  [/^\/instances\/([^/]+)\/files$/, filesPage],
  [/^\/instances\/([^/]+)\/ports$/, portsPage],
  [/^\/admin$/, adminPage],
  [/^\/secrets$/, secretsPage],
  [/^\/webhooks$/, webhooksPage],
];

let signedOutMessage = "";
let cleanup: Cleanup | void;

function layout(): { main: HTMLElement } {
  const app = document.getElementById("app")!;
  const s = session();
  const main = h("main", { id: "main", tabindex: "-1" });
  const skip = h("button", { type: "button", class: "skip" }, "Skip to content");
  skip.addEventListener("click", () => main.focus());
  const nav = s
    ? h(
        "nav",
        { "aria-label": "Main" },
        h("ul", null,
          h("li", null, h("a", { href: "#/projects", id: "nav-projects" }, "Projects")),
          h("li", null, h("a", { href: "#/instances", id: "nav-instances" }, "Instances")),
          h("li", null, h("a", { href: "#/webhooks", id: "nav-webhooks" }, "Webhooks")),
          s.admin ? h("li", null, h("a", { href: "#/secrets", id: "nav-secrets" }, "Secrets")) : null,
          s.admin ? h("li", null, h("a", { href: "#/admin", id: "nav-admin" }, "Admin")) : null,
        ),
      )
    : null;
  const who = s
    ? h("div", { class: "who" }, h("span", null, "Tenant ", h("strong", { id: "tenant" }, s.tenant), s.admin ? " (admin)" : ""), h("button", { type: "button", id: "sign-out", onclick: () => signOut("You signed out.") }, "Sign out"))
    : null;
  replace(
    app,
    skip,
    h("header", { class: "top" }, h("a", { href: s ? "#/projects" : "#/signin", class: "brand" }, h("img", { src: "favicon.svg", alt: "", width: 24, height: 24 }), "envd console"), nav, who),
    h("div", { id: "status", class: "visually-hidden", role: "status", "aria-live": "polite" }),
    main,
  );
  return { main };
}

function signInPage(main: HTMLElement): void {
  const input = h("input", { type: "password", id: "token", name: "token", autocomplete: "off", required: true, spellcheck: "false" });
  const problem = h("div", { id: "signin-problem" });
  const form = h(
    "form",
    { id: "signin-form", class: "card narrow" },
    field("API token", input, "A tenant's or the admin's token (DATA_DIR/admin.token, or one from envctl admin token create). It stays in this tab only."),
    h("button", { type: "submit", class: "primary" }, "Sign in"),
    problem,
  );
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const submit = form.querySelector("button")!;
    submit.disabled = true;
    try {
      await signIn(input.value.trim());
      signedOutMessage = "";
      location.hash = "#/projects";
      render();
    } catch (e) {
      replace(problem, errorBox(e, "Sign-in failed"));
      input.focus();
    } finally {
      submit.disabled = false;
    }
  });
  replace(main, pageTitle("Sign in"), signedOutMessage ? note("warn", h("span", { id: "signed-out-message" }, signedOutMessage)) : null, form);
  input.focus();
}

async function render(): Promise<void> {
  if (cleanup) {
    try {
      cleanup();
    } catch {
      // a page's cleanup must not stop the next page
    }
    cleanup = undefined;
  }
  const path = location.hash.replace(/^#/, "") || "/projects";
  if (!session()) {
    const token = storedToken();
    if (token && path !== "/signin") {
      try {
        await signIn(token);
      } catch (e) {
        signOut(e instanceof Error ? `Signed out: ${e.message}` : "Signed out.");
        return;
      }
    }
  }
  const { main } = layout();
  if (!session()) {
    if (path !== "/signin") {
      history.replaceState(null, "", "#/signin");
    }
    signInPage(main);
    return;
  }
  if (path === "/signin") {
    history.replaceState(null, "", "#/projects");
    return render();
  }
  for (const a of document.querySelectorAll("nav a")) {
    const href = a.getAttribute("href")!.slice(1);
    if (path === href || path.startsWith(href + "/")) a.setAttribute("aria-current", "page");
  }
  for (const [re, page] of routes) {
    const m = re.exec(path);
    if (!m) continue;
    const params = m.slice(1).map(decodeURIComponent);
    try {
      cleanup = await page(main, params);
    } catch (e) {
      if (!(e instanceof SignedOut)) main.append(errorBox(e));
    }
    main.querySelector<HTMLElement>("#page-title")?.focus({ preventScroll: true });
    return;
  }
  replace(main, pageTitle("Not found"), note("warn", `No page at ${path}. `, h("a", { href: "#/projects" }, "Projects")));
}

setSignedOutHandler((message) => {
  signedOutMessage = message;
  announce(message);
  if (location.hash !== "#/signin") location.hash = "#/signin";
  else render();
});

window.addEventListener("hashchange", () => void render());
void render();
