"""Server-sent events: the parser, and the event stream's resume after a
dropped connection against a local http.server that drops it."""

import io
import json
import time
import unittest

import _support

import envd
from envd import sse


def event(seq, typ="progress"):
    return {"seq": seq, "at": "2026-01-01T00:00:00Z", "type": typ, "message": "step %d" % seq}


def sse_bytes(ev):
    return ("id: %d\nevent: %s\ndata: %s\n\n" % (ev["seq"], ev["type"], json.dumps(ev))).encode()


OP_DONE = {"id": "op-1", "kind": "save", "target": "web-1", "state": "succeeded", "result": {"version": 2}}


class ParserTest(unittest.TestCase):
    def test_parse(self):
        text = (b": keep-alive\n\n"
                b"id: 1\r\nevent: a\r\ndata: {\"x\":\r\ndata: 1}\r\n\r\n"
                b"data:no space\n\n"
                b"id: 7\n\n"                      # no data: not dispatched
                b"event: end\ndata: {}\nretry: 5\nweird\n\n"
                b"id: 9\nevent: cut\ndata: half")  # cut off: not dispatched
        got = list(sse.parse(io.BytesIO(text)))
        self.assertEqual(got, [
            sse.SSEvent("1", "a", '{"x":\n1}'),
            sse.SSEvent(None, "message", "no space"),
            sse.SSEvent(None, "end", "{}"),
        ])


class DroppingServer:
    """GET /v1/operations/op-1/events: the first `drops` connections send
    the events after the cursor up to `per_conn` of them, then half of the
    next one, and drop the connection; later ones send the rest and end.
    Records each request's Last-Event-ID."""

    def __init__(self, total=6, per_conn=2, drops=2, fail_status=None):
        self.events = [event(i) for i in range(1, total + 1)]
        self.cursors = []
        self.conns = 0
        outer = self

        class H(_support.QuietHandler):
            def do_GET(self):
                if self.path.startswith("/v1/operations/op-1/events") and "wait=false" in self.path:
                    after = int(self.path.split("after=")[1].split("&")[0])
                    return self.send_json(200, [e for e in outer.events if e["seq"] > after])
                if self.path == "/v1/operations/op-1":
                    return self.send_json(200, OP_DONE)
                if not self.path.startswith("/v1/operations/op-1/events"):
                    return self.send_json(404, {"error": {"code": "not_found", "message": "no route"}})
                outer.conns += 1
                n = outer.conns
                cursor = self.headers.get("Last-Event-ID")
                outer.cursors.append(cursor)
                if fail_status:
                    return self.send_json(fail_status, {"error": {"code": "internal", "message": "boom"}})
                after = int(cursor or 0)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(b": keep-alive\n\n")
                pending = [e for e in outer.events if e["seq"] > after]
                if n <= drops:
                    for e in pending[:per_conn]:
                        self.wfile.write(sse_bytes(e))
                    if len(pending) > per_conn:
                        self.wfile.write(sse_bytes(pending[per_conn])[:20])  # half an event
                    self.wfile.flush()
                    self.close_connection = True
                    return
                for e in pending:
                    self.wfile.write(sse_bytes(e))
                self.wfile.write(b"event: end\ndata: " + json.dumps(OP_DONE).encode() + b"\n\n")
                self.close_connection = True

        self.server = _support.Server(H)
        self.url = self.server.url


class ResumeTest(unittest.TestCase):
    def client(self, url):
        c = envd.Client(url, "tok", retries=0, max_retry_wait=0.01, poll_interval=0.01)
        self.addCleanup(c.close)
        return c

    def test_stream_resumes_after_dropped_connections(self):
        s = DroppingServer(total=6, per_conn=2, drops=2)
        self.addCleanup(s.server.close)
        stream = self.client(s.url).events("op-1")
        seqs = [ev["seq"] for ev in stream]
        self.assertEqual(seqs, [1, 2, 3, 4, 5, 6], "every event once, in order, none from a half-sent one")
        self.assertEqual(s.cursors, [None, "2", "4"], "each reconnect starts after the last event seen")
        self.assertEqual(stream.reconnects, 2)
        self.assertEqual(stream.operation, OP_DONE)

    def test_stream_after_a_cursor(self):
        s = DroppingServer(total=4, drops=0)
        self.addCleanup(s.server.close)
        stream = self.client(s.url).events({"id": "op-1"}, after=2)
        self.assertEqual([ev["seq"] for ev in stream], [3, 4])
        self.assertEqual(s.cursors, ["2"])

    def test_wait_delivers_each_event_once(self):
        s = DroppingServer(total=5, per_conn=1, drops=3)
        self.addCleanup(s.server.close)
        seen = []
        op = self.client(s.url).wait("op-1", on_event=lambda ev: seen.append(ev["seq"]))
        self.assertEqual(op["state"], "succeeded")
        self.assertEqual(seen, [1, 2, 3, 4, 5])
        self.assertEqual(self.client(s.url).wait_result("op-1"), {"version": 2})

    def test_stream_gives_up_without_progress_and_wait_polls(self):
        s = DroppingServer(total=3, fail_status=500)
        self.addCleanup(s.server.close)
        c = self.client(s.url)
        with self.assertRaises(envd.Internal):
            list(c.events("op-1", max_failures=3))
        self.assertEqual(len(s.cursors), 3)
        seen = []
        op = c.wait("op-1", on_event=lambda ev: seen.append(ev["seq"]))
        self.assertEqual((op["state"], seen), ("succeeded", [1, 2, 3]), "polling after the stream kept failing")

    def test_permanent_errors_end_at_once(self):
        class H(_support.QuietHandler):
            hits = 0

            def do_GET(self):
                H.hits += 1
                if "op-gone" in self.path:
                    return self.send_json(404, {"error": {"code": "not_found", "message": "operation op-gone"}})
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(b'event: error\ndata: {"error":{"code":"unauthenticated","message":"token revoked"}}\n\n')
                self.close_connection = True
        s = _support.Server(H)
        self.addCleanup(s.close)
        c = self.client(s.url)
        with self.assertRaises(envd.NotFound):
            c.wait("op-gone")
        with self.assertRaises(envd.Unauthenticated):
            list(c.events("op-x"))
        self.assertEqual(H.hits, 2)

    def test_drop_resumes_after_the_last_event(self):
        cursors = []

        class H(_support.QuietHandler):
            def do_GET(self):
                cursor = self.headers.get("Last-Event-ID")
                cursors.append(cursor)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    for i in range(int(cursor or 0) + 1, 4):
                        chunk = sse_bytes(event(i))
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        self.wfile.flush()
                        time.sleep(0.2)
                    end = b"event: end\ndata: " + json.dumps(OP_DONE).encode() + b"\n\n"
                    self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(end), end))
                except OSError:
                    pass
                self.close_connection = True
        s = _support.Server(H)
        self.addCleanup(s.close)
        stream = self.client(s.url).events("op-1")
        seqs = []
        for ev in stream:
            seqs.append(ev["seq"])
            if ev["seq"] == 1 and stream.reconnects == 0:
                stream.drop()
        self.assertEqual(seqs, [1, 2, 3])
        self.assertEqual(cursors, [None, "1"])
        self.assertEqual(stream.reconnects, 1)
        self.assertEqual(stream.operation["state"], "succeeded")

    def test_wait_timeout(self):
        class H(_support.QuietHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for _ in range(40):
                    self.wfile.write(b": keep-alive\n\n")
                    self.wfile.flush()
                    time.sleep(0.05)
                self.close_connection = True
        s = _support.Server(H)
        self.addCleanup(s.close)
        t0 = time.monotonic()
        with self.assertRaises(TimeoutError):
            self.client(s.url).wait("op-slow", timeout=0.5)
        self.assertLess(time.monotonic() - t0, 5)


if __name__ == "__main__":
    unittest.main()
