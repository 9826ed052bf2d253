import type { ExecSession } from "./exec.js";

/** What xterm.js's Terminal offers and attachTerminal uses (duck-typed; no dependency). */
export interface TerminalLike {
  readonly cols: number;
  readonly rows: number;
  write(data: string | Uint8Array): void;
  /** Returns something with dispose() (xterm's IDisposable), or nothing. */
  onData(listener: (data: string) => void): { dispose(): void } | void;
  onResize(listener: (size: { cols: number; rows: number }) => void): { dispose(): void } | void;
}

export interface AttachOptions {
  /** Writes "[exit N]" (or the error) to the terminal when the command ends. Default: true. */
  showExit?: boolean;
}

/**
 * Wires a terminal to an exec session made with `tty: true`: keystrokes go to
 * stdin, output to the terminal, size changes to the resize channel. The
 * terminal's current size is sent at once (pass cols and rows to execStream
 * too: a size in the URL cannot race the command's first look). Returns a
 * function that detaches (the session stays open); the wiring also ends when
 * the command does.
 */
export function attachTerminal(term: TerminalLike, session: ExecSession, opts: AttachOptions = {}): () => void {
  const showExit = opts.showExit ?? true;
  const disposers: (() => void)[] = [];
  const keep = (d: { dispose(): void } | void | (() => void)) => {
    if (typeof d === "function") disposers.push(d);
    else if (d && typeof d.dispose === "function") disposers.push(() => d.dispose());
  };
  let attached = true;
  const detach = () => {
    if (!attached) return;
    attached = false;
    disposers.splice(0).forEach((f) => f());
  };
  keep(session.onStdout((b) => term.write(b)));
  keep(session.onStderr((b) => term.write(b)));
  keep(term.onData((d) => session.write(d)));
  keep(term.onResize(({ cols, rows }) => session.resize(cols, rows)));
  if (term.cols > 0 && term.rows > 0) session.resize(term.cols, term.rows);
  session.exit.then(
    (code) => {
      if (attached && showExit) term.write(`\r\n[exit ${code}]\r\n`);
      detach();
    },
    (err: unknown) => {
      if (attached && showExit) term.write(`\r\n[${err instanceof Error ? err.message : String(err)}]\r\n`);
      detach();
    },
  );
  return detach;
}
