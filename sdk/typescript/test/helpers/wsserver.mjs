// A WebSocket server for tests, written on node:http's upgrade event with the
// RFC 6455 framing by hand (no npm packages): it plays envd's exec stream.
import { createHash } from "node:crypto";
import { createServer } from "node:http";

const GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/** One server-side WebSocket connection. */
export class Conn {
  constructor(socket, req, protocols) {
    this.socket = socket;
    this.req = req;
    this.protocols = protocols;
    this.buf = Buffer.alloc(0);
    this.frag = [];
    this.closed = false;
    this.onmessage = () => {};
    this.onclose = () => {};
    this.closeCode = undefined;
    socket.on("data", (d) => this.feed(d));
    socket.on("close", () => {
      this.closed = true;
      this.onclose(this.closeCode);
    });
    socket.on("error", () => {});
  }

  feed(d) {
    this.buf = Buffer.concat([this.buf, d]);
    for (;;) {
      if (this.buf.length < 2) return;
      const b0 = this.buf[0];
      const b1 = this.buf[1];
      const fin = (b0 & 0x80) !== 0;
      const opcode = b0 & 0x0f;
      const masked = (b1 & 0x80) !== 0;
      let len = b1 & 0x7f;
      let off = 2;
      if (len === 126) {
        if (this.buf.length < 4) return;
        len = this.buf.readUInt16BE(2);
        off = 4;
      } else if (len === 127) {
        if (this.buf.length < 10) return;
        len = Number(this.buf.readBigUInt64BE(2));
        off = 10;
      }
      if (!masked) throw new Error("client frames must be masked (RFC 6455 5.1)");
      if (this.buf.length < off + 4 + len) return;
      const mask = this.buf.subarray(off, off + 4);
      const payload = Buffer.alloc(len);
      for (let i = 0; i < len; i++) payload[i] = this.buf[off + 4 + i] ^ mask[i % 4];
      this.buf = this.buf.subarray(off + 4 + len);
      if (opcode === 0x8) {
        this.closeCode = payload.length >= 2 ? payload.readUInt16BE(0) : 1005;
        if (!this.closed) this.writeFrame(0x8, payload.subarray(0, 2));
        this.socket.end();
        continue;
      }
      if (opcode === 0x9) {
        this.writeFrame(0xa, payload);
        continue;
      }
      if (opcode === 0xa) continue;
      this.frag.push(payload);
      if (fin) {
        const msg = Buffer.concat(this.frag);
        this.frag = [];
        this.onmessage(msg[0], msg.subarray(1), msg);
      }
    }
  }

  writeFrame(opcode, payload) {
    if (this.socket.destroyed) return;
    const len = payload.length;
    let head;
    if (len < 126) {
      head = Buffer.from([0x80 | opcode, len]);
    } else if (len < 65536) {
      head = Buffer.alloc(4);
      head[0] = 0x80 | opcode;
      head[1] = 126;
      head.writeUInt16BE(len, 2);
    } else {
      head = Buffer.alloc(10);
      head[0] = 0x80 | opcode;
      head[1] = 127;
      head.writeBigUInt64BE(BigInt(len), 2);
    }
    this.socket.write(Buffer.concat([head, payload]));
  }

  /** Sends a binary message on channel ch. */
  send(ch, payload) {
    const p = typeof payload === "string" ? Buffer.from(payload) : Buffer.from(payload ?? []);
    this.writeFrame(0x2, Buffer.concat([Buffer.from([ch]), p]));
  }

  /** Sends the exit message and closes with code. */
  exit(body, code = 1000) {
    this.send(4, JSON.stringify(body));
    this.close(code);
  }

  close(code = 1000, reason = "") {
    const p = Buffer.alloc(2 + Buffer.byteLength(reason));
    p.writeUInt16BE(code, 0);
    p.write(reason, 2);
    this.writeFrame(0x8, p);
  }
}

/**
 * Starts a server. onConnect(conn) gets each accepted connection; refuse(req)
 * may return [status, jsonBody] to refuse a handshake; onRequest(req, res)
 * answers plain HTTP requests (the client's probe after a refused handshake).
 */
export async function startWSServer({ onConnect, refuse, onRequest } = {}) {
  const conns = [];
  const server = createServer((req, res) => {
    if (onRequest) return onRequest(req, res);
    res.writeHead(404).end();
  });
  server.on("upgrade", (req, socket) => {
    const protocols = (req.headers["sec-websocket-protocol"] ?? "").split(",").map((s) => s.trim()).filter(Boolean);
    const refusal = refuse?.(req);
    if (refusal) {
      const [status, body] = refusal;
      const text = JSON.stringify(body);
      socket.end(`HTTP/1.1 ${status} Refused\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(text)}\r\nConnection: close\r\n\r\n${text}`);
      return;
    }
    const accept = createHash("sha1").update(req.headers["sec-websocket-key"] + GUID).digest("base64");
    const lines = ["HTTP/1.1 101 Switching Protocols", "Upgrade: websocket", "Connection: Upgrade", `Sec-WebSocket-Accept: ${accept}`];
    const chosen = protocols.find((p) => ["v1.exec.envd.dev", "v1.tcp.envd.dev", "ssh.envd.dev"].includes(p));
    if (chosen) lines.push(`Sec-WebSocket-Protocol: ${chosen}`);
    socket.write(lines.join("\r\n") + "\r\n\r\n");
    const c = new Conn(socket, req, protocols);
    conns.push(c);
    onConnect?.(c);
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  const url = `http://127.0.0.1:${server.address().port}`;
  return {
    url,
    conns,
    close: () =>
      new Promise((r) => {
        for (const c of conns) c.socket.destroy();
        server.closeAllConnections?.();
        server.close(() => r());
      }),
  };
}
