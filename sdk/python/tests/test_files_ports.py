"""Files, ports, SSH keys, rollouts, readiness: what each call sends and how
it reads the answer, against a recording http.server and the raw-socket
WebSocket server of test_websocket (tunnel, SSH stream)."""

import io
import json
import unittest

import _support
from test_websocket import WSServer

import envd
from envd import websocket as ws


class Recorder:
    """Answers every request with handler(h) -> (status, headers, body bytes); records (method, path, headers, body)."""

    def __init__(self, handler):
        self.requests = []
        outer = self

        class H(_support.QuietHandler):
            def handle_any(self):
                if self.headers.get("Transfer-Encoding") == "chunked":
                    body = b""
                    while True:
                        n = int(self.rfile.readline().strip(), 16)
                        if n == 0:
                            self.rfile.readline()
                            break
                        body += self.rfile.read(n)
                        self.rfile.readline()
                else:
                    body = self.read_body()
                outer.requests.append((self.command, self.path, dict(self.headers), body))
                status, headers, data = handler(self)
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = handle_any

        self.server = _support.Server(H)
        self.url = self.server.url


def js(body, status=200, **headers):
    return status, {"Content-Type": "application/json", **headers}, json.dumps(body).encode()


class RequestsTest(unittest.TestCase):
    def serve(self, handler=lambda h: js({})):
        r = Recorder(handler)
        self.addCleanup(r.server.close)
        c = envd.Client(r.url, "t", retries=0)
        self.addCleanup(c.close)
        return r, c

    def test_json_calls(self):
        cases = [
            (lambda c: c.make_dir("i", "/w/d", parents=True, mode="0700", user="dev"), "POST",
             "/v1/instances/i/files/mkdir?user=dev", {"path": "/w/d", "mode": "0700", "parents": True}),
            (lambda c: c.move_file("i", "/a", "/b", overwrite=True), "POST", "/v1/instances/i/files/move",
             {"from": "/a", "to": "/b", "overwrite": True}),
            (lambda c: c.copy_file("i", "/a", "/b", uid=1000, gid=100), "POST", "/v1/instances/i/files/copy?uid=1000&gid=100",
             {"from": "/a", "to": "/b"}),
            (lambda c: c.delete_file("i", "/w/d", recursive=True), "DELETE", "/v1/instances/i/files?path=%2Fw%2Fd&recursive=1", None),
            (lambda c: c.preview_url("i", 8080, ttl=600), "POST", "/v1/instances/i/ports/8080/token", {"ttl": "600s"}),
            (lambda c: c.public_ports("p"), "GET", "/v1/projects/p/ports", None),
            (lambda c: c.set_public_ports("p", [3000, 8080]), "PUT", "/v1/projects/p/ports", {"public": [3000, 8080]}),
            (lambda c: c.set_public_ports("p", [80], forwarded=[{"port": 3000, "label": "web"}]), "PUT", "/v1/projects/p/ports",
             {"public": [80], "forwarded": [{"port": 3000, "label": "web"}]}),
            (lambda c: c.list_ssh_keys(), "GET", "/v1/ssh-keys", None),
            (lambda c: c.add_ssh_key("ssh-ed25519 AAAA", name="laptop"), "POST", "/v1/ssh-keys",
             {"public_key": "ssh-ed25519 AAAA", "name": "laptop"}),
            (lambda c: c.delete_ssh_key(4), "DELETE", "/v1/ssh-keys/4", None),
            (lambda c: c.create_rollout("a", "b", dry_run=True, wave_size=2, validate=[("true",)]), "POST",
             "/v1/admin/rollouts", {"from": "a", "to": "b", "dry_run": True, "wave_size": 2, "validate": [["true"]]}),
            (lambda c: c.list_rollouts(), "GET", "/v1/admin/rollouts", None),
            (lambda c: c.get_rollout("ro-1"), "GET", "/v1/admin/rollouts/ro-1", None),
            (lambda c: c.pause_rollout("ro-1"), "POST", "/v1/admin/rollouts/ro-1/pause", None),
            (lambda c: c.resume_rollout("ro-1"), "POST", "/v1/admin/rollouts/ro-1/resume", None),
            (lambda c: c.cancel_rollout("ro-1"), "POST", "/v1/admin/rollouts/ro-1/cancel", None),
            (lambda c: c.rollback_rollout("ro-1"), "POST", "/v1/admin/rollouts/ro-1/rollback", None),
            (lambda c: c.set_validation("p", [["true"]]), "PUT", "/v1/projects/p/validation", {"validate": [["true"]]}),
            (lambda c: c.pull_image("alpine", "127.0.0.1:5000/alpine:3"), "POST",
             "/v1/images?name=alpine&ref=127.0.0.1%3A5000%2Falpine%3A3", None),
            (lambda c: c.tenant_tokens("acme"), "GET", "/v1/admin/tenants/acme/tokens", None),
        ]
        r, c = self.serve()
        for call, method, path, body in cases:
            with self.subTest(path=path):
                r.requests.clear()
                call(c)
                m, p, h, b = r.requests[0]
                self.assertEqual((m, p), (method, path))
                self.assertEqual(h.get("Authorization"), "Bearer t")
                self.assertEqual(json.loads(b) if b else None, body)
        self.assertTrue(r.requests[0][2].get("Idempotency-Key") is None)

    def test_rollout_create_sends_a_key(self):
        r, c = self.serve()
        c.create_rollout("a", "b", idempotency_key="k1")
        self.assertEqual(r.requests[0][2].get("Idempotency-Key"), "k1")

    def test_list_files_and_a_file_instead(self):
        listing = {"path": "/w", "entries": [{"name": "a", "type": "file"}]}

        def handler(h):
            if "path=%2Fw&" in h.path or h.path.endswith("path=%2Fw"):
                return js(listing, **{"X-Envd-File-Type": "dir"})
            return 200, {"X-Envd-File-Type": "file", "Content-Type": "text/plain"}, b"x"
        r, c = self.serve(handler)
        self.assertEqual(c.list_files("i", "/w", user="root"), listing)
        self.assertEqual(r.requests[0][1], "/v1/instances/i/files?path=%2Fw&user=root")
        with self.assertRaises(envd.InvalidArgument):
            c.list_files("i", "/w/a")

    def test_file_reads_are_retried_after_503(self):
        answers = [js({"error": {"code": "unavailable", "message": "busy"}}, 503, **{"Retry-After": "0"}),
                   js({"path": "/", "entries": []}, **{"X-Envd-File-Type": "dir"})]
        r, c = self.serve(lambda h: answers.pop(0))
        c.retries = 2
        self.assertEqual(c.list_files("i", "/")["entries"], [])
        self.assertEqual(len(r.requests), 2)

    def test_uploads_are_not_retried(self):
        r, c = self.serve(lambda h: js({"error": {"code": "unavailable", "message": "busy"}}, 503, **{"Retry-After": "0"}))
        c.retries = 2
        with self.assertRaises(envd.Unavailable):
            c.upload_files("i", "/d", io.BytesIO(b"\0" * 1024))
        self.assertEqual(len(r.requests), 1)

    def test_read_file_ranges(self):
        def handler(h):
            hd = {"X-Envd-File-Type": "file", "Content-Type": "text/plain; charset=utf-8",
                  "Last-Modified": "Mon, 30 Nov 2026 00:00:00 GMT"}
            rng = h.headers.get("Range")
            if rng == "bytes=2-4":
                return 206, {**hd, "Content-Range": "bytes 2-4/10"}, b"cde"
            if rng == "bytes=8-":
                return 206, {**hd, "Content-Range": "bytes 8-9/10", "X-Envd-Read-Only": "true"}, b"ij"
            if rng:
                return js({"error": {"code": "invalid_argument", "message": "range"}}, 416)
            return 200, hd, b"abcdefghij"
        r, c = self.serve(handler)
        part = c.read_file("i", "/f", offset=2, length=3)
        self.assertEqual((part["data"], part["offset"], part["size"], part["read_only"]), (b"cde", 2, 10, False))
        self.assertEqual(part["content_type"], "text/plain; charset=utf-8")
        self.assertEqual(part["modified"], "Mon, 30 Nov 2026 00:00:00 GMT")
        tail = c.read_file("i", "/f", offset=8)
        self.assertEqual((tail["data"], tail["read_only"]), (b"ij", True))
        whole = c.read_file("i", "/f")
        self.assertEqual((whole["data"], whole["size"]), (b"abcdefghij", 10))
        self.assertNotIn("Range", r.requests[-1][2])
        with self.assertRaises(envd.InvalidArgument):
            c.read_file("i", "/f", offset=50, length=1)
        with self.assertRaises(ValueError):
            c.read_file("i", "/f", length=0)

    def test_read_file_of_a_directory(self):
        r, c = self.serve(lambda h: js({"path": "/", "entries": []}, **{"X-Envd-File-Type": "dir"}))
        with self.assertRaises(envd.InvalidArgument):
            c.read_file("i", "/")

    def test_write_file_bytes_and_stream(self):
        r, c = self.serve(lambda h: js({"path": "/w/a b", "size": 5}))
        self.assertEqual(c.write_file("i", "/w/a b", "hello", mode="0600", mkdir=True)["size"], 5)
        m, p, h, b = r.requests[0]
        self.assertEqual((m, p, b), ("PUT", "/v1/instances/i/files?path=%2Fw%2Fa+b&mode=0600&mkdir=1", b"hello"))
        self.assertEqual(h.get("Content-Type"), "application/octet-stream")
        c.write_file("i", "/b", io.BytesIO(b"\x00\xff" * 1000))
        self.assertEqual(r.requests[1][3], b"\x00\xff" * 1000)
        self.assertEqual(r.requests[1][2].get("Transfer-Encoding"), "chunked")

    def test_download_and_upload(self):
        def handler(h):
            if h.command == "GET":
                return 200, {"Content-Type": "application/x-tar"}, b"TARBYTES"
            return js({"path": "/dst", "entries": 3})
        r, c = self.serve(handler)
        self.assertEqual(c.download_files("i", "/src", format="tar.zst"), b"TARBYTES")
        self.assertEqual(r.requests[0][1], "/v1/instances/i/files/archive?path=%2Fsrc&format=tar.zst")
        out = io.BytesIO()
        self.assertEqual(c.download_files("i", "/src", out), 8)
        self.assertEqual(out.getvalue(), b"TARBYTES")
        for body, ct in ((b"\0" * 1024, "application/x-tar"), (b"\x1f\x8b\x08\x00", "application/gzip"),
                         (io.BytesIO(b"\x28\xb5\x2f\xfd\x00"), "application/zstd")):
            self.assertEqual(c.upload_files("i", "/dst", body, mkdir=True), {"path": "/dst", "entries": 3})
            m, p, h, b = r.requests[-1]
            self.assertEqual((m, p, h.get("Content-Type")), ("POST", "/v1/instances/i/files/archive?path=%2Fdst&mkdir=1", ct))
        self.assertEqual(r.requests[-1][3], b"\x28\xb5\x2f\xfd\x00")

    def test_watch_files(self):
        def handler(h):
            if "recursive=1" in h.path:
                body = (": keep-alive\n\n"
                        "event: create\ndata: " + json.dumps({"type": "create", "path": "/w/a"}) + "\n\n"
                        "event: move\ndata: " + json.dumps({"type": "move", "path": "/w/b", "from": "/w/a"}) + "\n\n"
                        "event: end\ndata: {\"reason\": \"gone\"}\n\n")
            else:
                body = "event: error\ndata: " + json.dumps({"error": {"code": "not_found", "message": "no dir"}}) + "\n\n"
            return 200, {"Content-Type": "text/event-stream"}, body.encode()
        r, c = self.serve(handler)
        got = [(e["type"], e["path"], e.get("from")) for e in c.watch_files("i", "/w", recursive=True)]
        self.assertEqual(got, [("create", "/w/a", None), ("move", "/w/b", "/w/a")])
        self.assertEqual(r.requests[0][2].get("Accept"), "text/event-stream")
        with self.assertRaises(envd.NotFound):
            list(c.watch_files("i", "/gone"))

    def test_proxy_returns_the_answer_as_it_is(self):
        r, c = self.serve(lambda h: (418, {"Content-Type": "text/plain"}, ("teapot " + h.path).encode()))
        res = c.proxy("i", 3000, "/api/x?y=1", method="POST", body=b"b", headers={"X-A": "1"})
        self.assertEqual(res["status"], 418)
        self.assertEqual(res["body"], b"teapot /v1/instances/i/ports/3000/api/x?y=1")
        m, p, h, b = r.requests[0]
        self.assertEqual((m, b, h.get("Authorization"), h.get("X-A")), ("POST", b"b", "Bearer t", "1"))

    def test_list_ports_unwraps(self):
        r, c = self.serve(lambda h: js({"ports": [{"address": "127.0.0.1", "port": 8080, "protocol": "tcp", "public": False}]}))
        self.assertEqual([p["port"] for p in c.list_ports("i")], [8080])

    def test_readyz_returns_the_checks_on_503(self):
        state = {"ready": True}

        def handler(h):
            ok = state["ready"]
            return js({"status": "ready" if ok else "not_ready", "checks": {"db": {"status": "ok" if ok else "failed", "duration_ms": 1}}},
                      200 if ok else 503)
        r, c = self.serve(handler)
        self.assertEqual(c.readyz()["status"], "ready")
        state["ready"] = False
        got = c.readyz()
        self.assertEqual((got["status"], got["checks"]["db"]["status"]), ("not_ready", "failed"))

    def test_get_validation_reads_the_project(self):
        r, c = self.serve(lambda h: js({"name": "p", "validate": [["dot", "-V"]]}))
        self.assertEqual(c.get_validation("p"), {"validate": [["dot", "-V"]]})
        self.assertEqual(r.requests[0][1], "/v1/projects/p")

    def test_export_version(self):
        r, c = self.serve(lambda h: (200, {"Content-Type": "application/x-tar"}, b"OCI"))
        self.assertEqual(c.export_version("p", 3), b"OCI")
        self.assertEqual(r.requests[0][1], "/v1/projects/p/versions/3/export")


class ByteStreamTest(unittest.TestCase):
    def serve(self, script, **kw):
        s = WSServer(script, **kw)
        self.addCleanup(s.close)
        return s

    def test_tunnel_both_ways_and_half_close(self):
        got = []

        def script(c, hdrs):
            while True:
                fin, op, payload, masked = c.read_frame()
                got.append(payload)
                if payload == b"":
                    break
            c.send(ws.OP_BINARY, b"pong")
            c.send(ws.OP_BINARY, b"")
            c.close(1000)
        s = self.serve(script, subprotocol="v1.tcp.envd.dev")
        c = envd.Client(s.url, "t")
        with c.tunnel("i", 5432) as t:
            t.send(b"ping")
            t.close_write()
            self.assertEqual(t.read_all(), b"pong")
        self.assertTrue(s.done.wait(10))
        self.assertEqual(s.errors, [])
        self.assertEqual(got, [b"ping", b""])
        line, hdrs = s.requests[0]
        self.assertEqual(line, "GET /v1/instances/i/tcp/5432 HTTP/1.1")
        self.assertEqual(hdrs["sec-websocket-protocol"], "v1.tcp.envd.dev")
        self.assertEqual(hdrs["authorization"], "Bearer t")

    def test_refused_tunnel_is_an_api_error(self):
        body = json.dumps({"error": {"code": "port_unreachable", "message": "nothing listens on port 1"}}).encode()
        refuse = (b"HTTP/1.1 502 Bad Gateway\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)) + body
        s = self.serve(lambda c, h: None, refuse=refuse)
        with self.assertRaises(envd.PortUnreachable):
            envd.Client(s.url, "t").tunnel("i", 1)

    def test_ssh_stream(self):
        def script(c, hdrs):
            c.send(ws.OP_BINARY, b"SSH-2.0-envd\r\n")
            c.read_frame()
        s = self.serve(script, subprotocol="ssh.envd.dev")
        with envd.Client(s.url, "t").ssh("i") as st:
            self.assertEqual(st.recv(), b"SSH-2.0-envd\r\n")
        self.assertEqual(s.requests[0][0], "GET /v1/instances/i/ssh HTTP/1.1")
        self.assertEqual(s.requests[0][1]["sec-websocket-protocol"], "ssh.envd.dev")


if __name__ == "__main__":
    unittest.main()
