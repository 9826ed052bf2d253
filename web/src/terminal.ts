// The terminal: xterm.js over the exec WebSocket (the SDK's execStream with
// a TTY and attachTerminal), fitted to its box and resized with it, and
// connected again when the connection drops (not when the shell exits).

import { Terminal } from "@xterm/xterm";
import { FitAddon } from "@xterm/addon-fit";
import { attachTerminal, type ExecSession } from "../../sdk/typescript/src/index.js";
import { isUnauthenticated, session, signOut } from "./session.js";

const MAX_RETRIES = 5;

/** Opens a terminal in host; focus: give it the keyboard once connected (after a Reconnect). */
export function openTerminal(host: HTMLElement, id: string, status: (s: string) => void, focus = false): { close(): void } {
  const term = new Terminal({
    cursorBlink: true,
    fontFamily: "ui-monospace, 'DejaVu Sans Mono', 'Liberation Mono', monospace",
    fontSize: 14,
    scrollback: 5000,
    screenReaderMode: false,
    theme: { background: "#0f172a", foreground: "#e2e8f0" },
  });
  const fit = new FitAddon();
  term.loadAddon(fit);
  term.open(host);
  // Keyboard users leave the terminal with Escape then Tab (or Shift+Tab):
  // the Tab goes to the page, not to the shell; Escape alone still reaches it.
  let escaped = false;
  term.attachCustomKeyEventHandler((ev) => {
    if (ev.type !== "keydown") return true;
    if (escaped && ev.key === "Tab") {
      escaped = false;
      return false;
    }
    escaped = ev.key === "Escape";
    return true;
  });
  term.textarea?.setAttribute("aria-label", `Terminal of ${id}`);
  const refit = () => {
    try {
      fit.fit();
    } catch {
      // not laid out yet
    }
  };
  refit();
  const ro = new ResizeObserver(() => refit());
  ro.observe(host);

  let closed = false;
  let sess: ExecSession | undefined;
  let detach: (() => void) | undefined;
  let retries = 0;
  let timer: ReturnType<typeof setTimeout> | undefined;

  const connect = () => {
    const s = session();
    if (closed || !s) return;
    status(retries ? `Reconnecting (attempt ${retries} of ${MAX_RETRIES})…` : "Connecting…");
    sess = s.client.instances.execStream(id, { args: ["sh", "-l"], tty: true, cols: term.cols, rows: term.rows, env: ["TERM=xterm-256color"] });
    detach = attachTerminal(term, sess);
    const mine = sess;
    mine.opened.then(() => {
      if (closed || mine !== sess) return;
      retries = 0;
      status(`Connected to ${id} (${term.cols}×${term.rows}).`);
      host.dataset.connected = "true";
      if (focus) term.focus();
    }, () => {});
    mine.exit.then(
      (code) => {
        if (closed || mine !== sess) return;
        host.dataset.connected = "false";
        status(`The shell exited with code ${code}. Press Reconnect for a new one.`);
      },
      (err: unknown) => {
        if (closed || mine !== sess) return;
        host.dataset.connected = "false";
        if (isUnauthenticated(err)) {
          signOut(`Signed out: the server refused the token (${(err as Error).message}). Sign in again.`);
          return;
        }
        if (retries >= MAX_RETRIES) {
          status(`Disconnected: ${(err as Error).message ?? err}. Press Reconnect to try again.`);
          return;
        }
        retries++;
        const delay = Math.min(500 * 2 ** (retries - 1), 8000);
        status(`Disconnected (${(err as Error).message ?? err}); reconnecting in ${Math.round(delay / 100) / 10} s…`);
        timer = setTimeout(connect, delay);
      },
    );
  };
  term.onResize(({ cols, rows }) => {
    if (!closed && host.dataset.connected === "true") status(`Connected to ${id} (${cols}×${rows}).`);
  });
  // Connect once the terminal has its real size (fonts loaded, laid out):
  // the size goes in the request, so the shell's first look at its
  // terminal sees it.
  void document.fonts.ready
    .then(() => new Promise((r) => requestAnimationFrame(r)))
    .then(() => {
      refit();
      connect();
    });

  return {
    close() {
      closed = true;
      clearTimeout(timer);
      ro.disconnect();
      detach?.();
      sess?.close();
      term.dispose();
    },
  };
}
