// A server-sent events parser over a fetch body (a ReadableStream of bytes),
// following the HTML standard's event stream interpretation: lines end with
// CRLF, LF or CR; "data" lines are joined with LF; a blank line dispatches;
// comments (":...") are ignored.

/** One dispatched server-sent event. */
export interface SSEMessage {
  /** The `id` field of this event, when it had one. */
  id?: string;
  /** The `event` field; "message" when absent. */
  event: string;
  data: string;
}

/** Yields the events of an event stream until it ends. */
export async function* parseSSE(body: ReadableStream<Uint8Array>): AsyncGenerator<SSEMessage, void, undefined> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  let id: string | undefined;
  let event = "";
  let data: string[] = [];
  let sawData = false;

  function* lines(final: boolean): Generator<string> {
    for (;;) {
      const m = /\r\n|\n|\r/.exec(buf);
      if (!m) break;
      // A CR at the very end may be the first half of a CRLF split across chunks.
      if (m[0] === "\r" && m.index === buf.length - 1 && !final) break;
      const line = buf.slice(0, m.index);
      buf = buf.slice(m.index + m[0].length);
      yield line;
    }
    if (final && buf !== "") {
      // An unterminated last line is dropped by the standard; so are we.
      buf = "";
    }
  }

  function take(line: string): SSEMessage | undefined {
    if (line === "") {
      const msg = sawData ? { ...(id !== undefined ? { id } : {}), event: event || "message", data: data.join("\n") } : undefined;
      id = undefined;
      event = "";
      data = [];
      sawData = false;
      return msg;
    }
    if (line.startsWith(":")) return undefined;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    switch (field) {
      case "id":
        if (!value.includes("\0")) id = value;
        break;
      case "event":
        event = value;
        break;
      case "data":
        data.push(value);
        sawData = true;
        break;
    }
    return undefined;
  }

  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) {
        buf += decoder.decode();
        for (const line of lines(true)) {
          const msg = take(line);
          if (msg) yield msg;
        }
        return;
      }
      buf += decoder.decode(value, { stream: true });
      for (const line of lines(false)) {
        const msg = take(line);
        if (msg) yield msg;
      }
    }
  } finally {
    reader.releaseLock();
    await body.cancel().catch(() => {});
  }
}
