"""The WebSocket client and the exec channel protocol against a tiny
WebSocket server written here (raw sockets, RFC 6455 server side)."""

import json
import socket
import struct
import threading
import unittest

import _support

import envd
from envd import websocket as ws


class WSServer:
    """Accepts connections; for each, answers the handshake (or refuses it
    with `refuse` = raw HTTP answer) and runs script(conn, request_headers)
    in a thread. Exceptions of the script are kept in .errors."""

    def __init__(self, script, refuse=None, subprotocol="v1.exec.envd.dev", accept_override=None):
        self.script = script
        self.refuse = refuse
        self.subprotocol = subprotocol
        self.accept_override = accept_override
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.port = self.sock.getsockname()[1]
        self.url = "http://127.0.0.1:%d" % self.port
        self.requests = []
        self.errors = []
        self.done = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        try:
            conn, _ = self.sock.accept()
        except OSError:
            return
        try:
            buf = b""
            while b"\r\n\r\n" not in buf:
                buf += conn.recv(4096)
            head = buf.split(b"\r\n\r\n")[0].decode()
            line, *hl = head.split("\r\n")
            hdrs = {}
            for h in hl:
                k, _, v = h.partition(":")
                hdrs[k.strip().lower()] = v.strip()
            self.requests.append((line, hdrs))
            if self.refuse:
                conn.sendall(self.refuse)
                conn.close()
                return
            accept = self.accept_override or ws.accept_key(hdrs["sec-websocket-key"])
            resp = ("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                    "Sec-WebSocket-Accept: %s\r\n" % accept)
            if self.subprotocol:
                resp += "Sec-WebSocket-Protocol: %s\r\n" % self.subprotocol
            conn.sendall((resp + "\r\n").encode())
            self.script(ServerConn(conn), hdrs)
        except Exception as e:  # reported by the test
            self.errors.append(e)
        finally:
            conn.close()
            self.done.set()

    def close(self):
        self.sock.close()


class ServerConn:
    def __init__(self, sock):
        self.sock = sock
        self.buf = b""

    def _read(self, n):
        while len(self.buf) < n:
            b = self.sock.recv(65536)
            if not b:
                raise EOFError("client closed")
            self.buf += b
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_frame(self):
        """(fin, opcode, payload, masked) of the client's next frame."""
        b0, b1 = self._read(2)
        n = b1 & 0x7F
        if n == 126:
            (n,) = struct.unpack("!H", self._read(2))
        elif n == 127:
            (n,) = struct.unpack("!Q", self._read(8))
        masked = bool(b1 & 0x80)
        key = self._read(4) if masked else b""
        payload = self._read(n)
        if masked:
            payload = ws.apply_mask(payload, key)
        return bool(b0 & 0x80), b0 & 0x0F, payload, masked

    def send(self, opcode, payload, fin=True):
        self.sock.sendall(ws.encode_frame(opcode, payload, fin=fin, mask=False))

    def close(self, code, reason=b""):
        self.send(ws.OP_CLOSE, struct.pack("!H", code) + reason)


class FramingTest(unittest.TestCase):
    def serve(self, script, **kw):
        s = WSServer(script, **kw)
        self.addCleanup(s.close)
        return s

    def finish(self, s):
        self.assertTrue(s.done.wait(10), "server script did not finish")
        if s.errors:
            raise s.errors[0]

    def test_handshake_and_masked_frames_of_every_length_form(self):
        sizes = [0, 1, 125, 126, 65535, 65536, 200000]
        got = []

        def script(c, hdrs):
            for _ in sizes:
                fin, op, payload, masked = c.read_frame()
                got.append((fin, op, payload, masked))
            c.send(ws.OP_BINARY, b"ok")
            fin, op, payload, masked = c.read_frame()
            got.append((fin, op, payload, masked))

        s = self.serve(script)
        conn = ws.connect(s.url + "/x?y=1", ["v1.exec.envd.dev"], {"Authorization": "Bearer tok"})
        self.assertEqual(conn.subprotocol, "v1.exec.envd.dev")
        payloads = [bytes((i * 7 + n) % 256 for i in range(n)) for n in sizes]
        for p in payloads:
            conn.send(p)
        self.assertEqual(conn.recv(), (ws.OP_BINARY, b"ok"))
        conn.close(1000, "bye")
        self.finish(s)
        line, hdrs = s.requests[0]
        self.assertEqual(line, "GET /x?y=1 HTTP/1.1")
        self.assertEqual(hdrs["upgrade"], "websocket")
        self.assertEqual(hdrs["sec-websocket-version"], "13")
        self.assertEqual(hdrs["sec-websocket-protocol"], "v1.exec.envd.dev")
        self.assertEqual(hdrs["authorization"], "Bearer tok")
        self.assertNotIn("sec-websocket-extensions", hdrs)
        for (fin, op, payload, masked), want in zip(got, payloads):
            self.assertTrue(fin and masked, "client frames are final and masked")
            self.assertEqual(op, ws.OP_BINARY)
            self.assertEqual(payload, want)
        fin, op, payload, masked = got[-1]
        self.assertEqual((op, payload), (ws.OP_CLOSE, struct.pack("!H", 1000) + b"bye"))

    def test_fragments_are_joined_and_pings_answered_between_them(self):
        pongs = []

        def script(c, hdrs):
            c.send(ws.OP_BINARY, b"\x01hel", fin=False)
            c.send(ws.OP_PING, b"are you there")
            c.send(ws.OP_CONT, b"lo ", fin=False)
            c.send(ws.OP_CONT, b"world", fin=True)
            fin, op, payload, masked = c.read_frame()
            pongs.append((op, payload, masked))
            c.send(ws.OP_TEXT, "é".encode())
            c.close(4404, b"gone")
            fin, op, payload, masked = c.read_frame()
            pongs.append((op, payload, masked))

        s = self.serve(script)
        conn = ws.connect(s.url, ["v1.exec.envd.dev"])
        self.assertEqual(conn.recv(), (ws.OP_BINARY, b"\x01hello world"))
        self.assertEqual(conn.recv(), (ws.OP_TEXT, "é".encode()))
        op, payload = conn.recv()
        self.assertEqual(op, ws.OP_CLOSE)
        self.assertEqual((conn.close_code, conn.close_reason), (4404, "gone"))
        self.finish(s)
        self.assertEqual(pongs[0], (ws.OP_PONG, b"are you there", True))
        self.assertEqual(pongs[1], (ws.OP_CLOSE, struct.pack("!H", 4404), True), "the close is echoed")
        conn.abort()

    def test_protocol_violations(self):
        def cont_first(c, hdrs):
            c.send(ws.OP_CONT, b"x")

        def long_ping(c, hdrs):
            c.sock.sendall(bytes([0x89, 126, 0, 200]) + b"p" * 200)

        def reserved(c, hdrs):
            c.sock.sendall(bytes([0xC2, 1]) + b"x")

        def eof(c, hdrs):
            c.sock.shutdown(socket.SHUT_RDWR)

        for name, script in [("continuation first", cont_first), ("long ping", long_ping),
                             ("reserved bits", reserved), ("eof", eof)]:
            with self.subTest(name):
                s = self.serve(script)
                conn = ws.connect(s.url, ["v1.exec.envd.dev"])
                with self.assertRaises(ws.WebSocketError):
                    conn.recv()
                conn.abort()
                self.finish(s)

    def test_message_limit(self):
        def script(c, hdrs):
            c.send(ws.OP_BINARY, b"a" * 600, fin=False)
            c.send(ws.OP_CONT, b"b" * 600)
        s = self.serve(script)
        conn = ws.connect(s.url, ["v1.exec.envd.dev"], max_message=1000)
        with self.assertRaises(ws.WebSocketError):
            conn.recv()
        conn.abort()
        self.finish(s)

    def test_bad_accept_key_and_unoffered_subprotocol(self):
        for kw in ({"accept_override": "bm90IHRoZSBrZXk="}, {"subprotocol": "other"}):
            with self.subTest(kw):
                s = self.serve(lambda c, h: None, **kw)
                with self.assertRaises(ws.WebSocketError):
                    ws.connect(s.url, ["v1.exec.envd.dev"])
                self.finish(s)


def exec_client(s, **kw):
    return envd.Client(s.url, "tok", retries=kw.pop("retries", 0), **kw)


class ExecProtocolTest(unittest.TestCase):
    def serve(self, script, **kw):
        s = WSServer(script, **kw)
        self.addCleanup(s.close)
        return s

    def finish(self, s):
        self.assertTrue(s.done.wait(10))
        if s.errors:
            raise s.errors[0]

    def test_streaming_exec(self):
        received = []

        def script(c, hdrs):
            # stdin until EOF, then echo it back on stdout and report on stderr
            data = b""
            while True:
                fin, op, payload, masked = c.read_frame()
                received.append(payload)
                if payload[0] == 5:
                    break
                if payload[0] == 0:
                    data += payload[1:]
            c.send(ws.OP_BINARY, b"\x01" + data)
            c.send(ws.OP_BINARY, b"\x09unknown channel")
            c.send(ws.OP_BINARY, b"")
            c.send(ws.OP_BINARY, b"\x02warning")
            c.send(ws.OP_BINARY, b'\x04{"exit_code": 3}')
            c.close(1000)
            c.read_frame()

        s = self.serve(script)
        c = exec_client(s)
        out, err = bytearray(), bytearray()
        big = b"x" * 70000
        code = c.exec_stream("web-1", ["sh", "-c", "cat"], stdin=big, stdout=out.extend, stderr=err.extend,
                             env=["A=1"], cwd="/src")
        self.assertEqual(code, 3)
        self.assertEqual(bytes(out), big)
        self.assertEqual(bytes(err), b"warning")
        self.finish(s)
        line, hdrs = s.requests[0]
        self.assertEqual(line, "GET /v1/instances/web-1/exec/ws?cmd=sh&cmd=-c&cmd=cat&env=A%3D1&cwd=%2Fsrc HTTP/1.1")
        self.assertEqual(hdrs["authorization"], "Bearer tok")
        stdin_msgs = [m for m in received if m[0] == 0]
        self.assertTrue(all(len(m) - 1 <= 32 << 10 for m in stdin_msgs), "stdin chunks of at most 32 KiB")
        self.assertEqual(received[-1], b"\x05")

    def test_tty_session_resize_and_token_subprotocol(self):
        received = []

        def script(c, hdrs):
            for _ in range(2):
                received.append(c.read_frame()[2])
            c.send(ws.OP_BINARY, b"\x01$ ")
            c.send(ws.OP_BINARY, b'\x04{"exit_code": 0}')
            c.close(1000)

        s = self.serve(script)
        c = exec_client(s)
        with c.exec_session("web-1", ["bash"], tty=True, cols=120, rows=40, token_in_subprotocol=True) as sess:
            sess.resize(100, 30)
            sess.interrupt()
            self.assertEqual(list(sess), [("stdout", b"$ ")])
            self.assertEqual(sess.exit_code, 0)
        self.finish(s)
        line, hdrs = s.requests[0]
        self.assertIn("tty=1&cols=120&rows=40", line)
        self.assertNotIn("authorization", hdrs)
        self.assertEqual(hdrs["sec-websocket-protocol"], "v1.exec.envd.dev, " + envd.bearer_subprotocol("tok"))
        self.assertEqual(json.loads(received[0][1:]), {"cols": 100, "rows": 30})
        self.assertEqual(received[0][0], 3)
        self.assertEqual(received[1], b"\x00\x03")

    def test_exit_message_with_an_error(self):
        def script(c, hdrs):
            c.send(ws.OP_BINARY, b'\x04' + json.dumps({"exit_code": -1, "error": {
                "code": "failed_precondition", "message": "instance is Paused", "details": {"state": "Paused"}}}).encode())
            c.close(4409)

        s = self.serve(script)
        with self.assertRaises(envd.FailedPrecondition) as cm:
            exec_client(s).exec_stream("web-1", ["true"])
        self.assertEqual((cm.exception.status, cm.exception.state), (409, "Paused"))
        self.finish(s)

    def test_close_without_exit_message(self):
        def script(c, hdrs):
            c.close(4404, b"no such instance")

        s = self.serve(script)
        with self.assertRaises(envd.NotFound) as cm:
            exec_client(s).exec_stream("web-1", ["true"])
        self.assertEqual(cm.exception.status, 404)
        self.finish(s)

        s = self.serve(lambda c, h: c.close(1011))
        with self.assertRaises(envd.StreamError):
            exec_client(s).exec_stream("web-1", ["true"])
        self.finish(s)

    def test_refused_upgrade_is_an_api_error(self):
        body = b'{"error":{"code":"invalid_argument","message":"cmd is required"}}'
        refuse = b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
        s = self.serve(None, refuse=refuse)
        with self.assertRaises(envd.InvalidArgument) as cm:
            exec_client(s).exec_session("web-1", ["true"])
        self.assertEqual(cm.exception.message, "cmd is required")
        self.finish(s)

        body = b'{"error":{"code":"resource_exhausted","message":"exec limit","details":{"kind":"exec","limit":32,"retry_after_seconds":2}}}'
        refuse = b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 2\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
        s = self.serve(None, refuse=refuse)
        with self.assertRaises(envd.ResourceExhausted) as cm:
            exec_client(s).exec_session("web-1", ["true"])
        self.assertEqual(cm.exception.retry_after, 2)
        self.finish(s)


if __name__ == "__main__":
    unittest.main()
