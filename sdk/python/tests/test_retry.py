"""Retries: creating calls keep their Idempotency-Key across retries after a
connection error, a 503 or a 429 with Retry-After; calls that could do work
twice are not retried."""

import json
import unittest

import _support

import envd


class Recorder:
    """A server that answers each request with the next scripted answer:
    ("drop",) closes the connection without an answer, (status, body, headers)
    answers."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.requests = []
        outer = self

        class H(_support.QuietHandler):
            def handle_any(self):
                body = self.read_body()
                outer.requests.append((self.command, self.path, dict(self.headers), body))
                a = outer.answers.pop(0) if outer.answers else (500, {"error": {"code": "internal", "message": "no answer left"}}, {})
                if a[0] == "drop":
                    self.close_connection = True
                    return
                self.send_json(*a)

            do_GET = do_POST = do_PUT = do_DELETE = handle_any

        self.server = _support.Server(H)
        self.url = self.server.url

    def keys(self):
        return [h.get("Idempotency-Key") for _, _, h, _ in self.requests]


PROJECT = {"name": "web", "base_image": "busybox", "current_version": 1}
UNAVAILABLE = (503, {"error": {"code": "unavailable", "message": "database down"}}, {"Retry-After": "0"})
BUSY = (429, {"error": {"code": "resource_exhausted", "message": "busy", "details": {"kind": "saves", "limit": 4, "retry_after_seconds": 0}}}, {"Retry-After": "0"})


class RetryTest(unittest.TestCase):
    def serve(self, answers):
        r = Recorder(answers)
        self.addCleanup(r.server.close)
        c = envd.Client(r.url, "tok", retries=3, max_retry_wait=0.05)
        self.addCleanup(c.close)
        return r, c

    def test_create_keeps_its_key_across_retries(self):
        r, c = self.serve([("drop",), UNAVAILABLE, BUSY, (201, PROJECT, {})])
        self.assertEqual(c.create_project("web", "busybox", volumes=["work:/w"], egress="none"), PROJECT)
        keys = r.keys()
        self.assertEqual(len(keys), 4)
        self.assertTrue(keys[0])
        self.assertEqual(set(keys), {keys[0]}, "one key for all attempts")
        self.assertEqual(json.loads(r.requests[0][3]), {"name": "web", "base": "busybox", "volumes": ["work:/w"], "egress": "none"})

    def test_a_new_call_gets_a_new_key_and_a_given_key_is_sent(self):
        r, c = self.serve([(201, PROJECT, {}), (201, PROJECT, {}), (202, {"id": "op-1", "state": "pending"}, {})])
        c.create_project("web", "busybox")
        c.create_project("web", "busybox", idempotency_key="mine")
        c.save("web-1", message="m", idempotency_key="k2")
        k = r.keys()
        self.assertNotEqual(k[0], "mine")
        self.assertEqual(k[1:], ["mine", "k2"])

    def test_retries_run_out(self):
        r, c = self.serve([UNAVAILABLE] * 5)
        with self.assertRaises(envd.Unavailable):
            c.save("web-1")
        self.assertEqual(len(r.requests), 4, "the call and 3 retries")

    def test_a_long_retry_after_is_not_waited_for(self):
        busy = (429, {"error": {"code": "resource_exhausted", "message": "busy"}}, {"Retry-After": "30"})
        r, c = self.serve([busy])
        with self.assertRaises(envd.ResourceExhausted) as cm:
            c.save("web-1")
        self.assertEqual(cm.exception.retry_after, 30)
        self.assertEqual(len(r.requests), 1)

    def test_exec_is_not_retried_after_503_or_a_drop(self):
        r, c = self.serve([UNAVAILABLE])
        with self.assertRaises(envd.Unavailable):
            c.exec("web-1", ["true"])
        self.assertEqual(len(r.requests), 1)
        r, c = self.serve([("drop",)])
        with self.assertRaises(ConnectionError):
            c.exec("web-1", ["true"])
        self.assertEqual(len(r.requests), 1)

    def test_exec_is_retried_after_429(self):
        result = {"exit_code": 0, "stdout": "hi\n", "stderr": ""}
        r, c = self.serve([BUSY, (200, result, {})])
        self.assertEqual(c.exec("web-1", ["echo", "hi"], env=["A=1"], timeout=5, generation=2), result)
        self.assertEqual(json.loads(r.requests[1][3]), {"args": ["echo", "hi"], "env": ["A=1"], "timeout": "5s", "generation": 2})

    def test_async_create_asks_respond_async(self):
        op = {"id": "op-9", "kind": "restore", "target": "web-2", "state": "pending"}
        r, c = self.serve([(202, op, {}), (201, {"id": "web-3", "state": "Running"}, {})])
        self.assertEqual(c.up("web", wait=False, ttl=3600, version=2), op)
        c.up("web", retain=True, ttl="none")
        (m, path, h, body), (_, _, h2, body2) = r.requests
        self.assertEqual((m, path), ("POST", "/v1/projects/web/instances"))
        self.assertEqual(h.get("Prefer"), "respond-async")
        self.assertIsNone(h2.get("Prefer"))
        self.assertEqual(json.loads(body), {"version": 2, "ttl": "3600s"})
        self.assertEqual(json.loads(body2), {"ttl": "none", "retain": True})

    def test_fork_with_memory_body(self):
        op = {"id": "op-7", "kind": "fork", "target": "web-1", "state": "pending"}
        r, c = self.serve([(202, op, {}), (202, op, {})])
        self.assertEqual(c.fork("web-1", memory=True, count=4), op)
        c.fork("web-1", message="b")
        (m, path, _, body), (_, _, _, body2) = r.requests
        self.assertEqual((m, path), ("POST", "/v1/instances/web-1/fork"))
        self.assertEqual(json.loads(body), {"memory": True, "count": 4})
        self.assertEqual(json.loads(body2), {"message": "b"})

    def test_keep_alive_connection_reused_and_reopened(self):
        r, c = self.serve([(200, {"version": "x"}, {})] * 3)
        c.info()
        c.info()
        self.assertEqual(len(r.requests), 2)
        c.close()  # the next call opens a new connection
        c.info()
        self.assertEqual(len(r.requests), 3)

    def test_a_kept_alive_connection_closed_while_idle_is_reopened_once(self):
        hits = []

        class H(_support.QuietHandler):
            def do_POST(self):
                hits.append(self.read_body())
                # Answers as if keeping the connection, then closes it: the
                # client learns only when it sends the next request.
                self.send_json(200, {"exit_code": 0, "stdout": "", "stderr": ""})
                self.close_connection = True
        s = _support.Server(H)
        self.addCleanup(s.close)
        c = envd.Client(s.url, "tok", retries=0)
        self.addCleanup(c.close)
        for _ in range(3):
            self.assertEqual(c.exec("web-1", ["true"])["exit_code"], 0)
        self.assertEqual(len(hits), 3, "each exec reached the server once")

    def test_import_image_bodies(self):
        import gzip
        import io
        import tempfile
        got = []

        class H(_support.QuietHandler):
            def do_POST(self):
                if self.headers.get("Transfer-Encoding") == "chunked":
                    body = b""
                    while True:
                        n = int(self.rfile.readline().strip(), 16)
                        chunk = self.rfile.read(n + 2)[:n]
                        if n == 0:
                            break
                        body += chunk
                else:
                    body = self.read_body()
                got.append((self.path, self.headers.get("Content-Type"), self.headers.get("Transfer-Encoding"), body))
                self.send_json(201, {"name": "img", "digest": "sha256:x"})
        s = _support.Server(H)
        self.addCleanup(s.close)
        c = envd.Client(s.url, "tok")
        self.addCleanup(c.close)
        tar = b"t" * 3000
        gz = gzip.compress(tar)
        c.import_image("a b", tar)
        c.import_image("img", io.BytesIO(gz))
        with tempfile.NamedTemporaryFile(suffix=".tar") as f:
            f.write(tar)
            f.flush()
            c.import_image("img", f.name)
        self.assertEqual(got, [
            ("/v1/images?name=a+b", "application/x-tar", None, tar),
            ("/v1/images?name=img", "application/gzip", "chunked", gz),
            ("/v1/images?name=img", "application/x-tar", "chunked", tar),
        ])

    def test_set_current_is_a_compare_and_swap(self):
        conflict = (409, {"error": {"code": "conflict", "message": "current is 4, not 3"}}, {})
        r, c = self.serve([conflict])
        with self.assertRaises(envd.Conflict):
            c.set_current("web", 2, expected_current=3)
        self.assertEqual(json.loads(r.requests[0][3]), {"version": 2, "expected_current": 3})
        self.assertEqual(len(r.requests), 1)

    def test_checkpoint_routes(self):
        op = {"id": "op-1", "kind": "checkpoint", "state": "pending"}
        r, c = self.serve([(202, op, {}), (200, [], {}), (200, {"id": 2}, {}), (200, {"id": 2}, {}),
                           (200, {"name": "w"}, {}), (201, {"id": "p-1"}, {})])
        self.assertEqual(c.checkpoint("p-1", message="m", set_current=True), op)
        self.assertEqual(c.list_checkpoints("p"), [])
        c.get_checkpoint("p", 2)
        c.delete_checkpoint("p", 2)
        c.restore_volume("p", "w", checkpoint=2)
        c.create_instance("p", checkpoint=2)
        got = [(m, path, json.loads(b) if b else None) for m, path, _, b in r.requests]
        self.assertEqual(got, [
            ("POST", "/v1/instances/p-1/checkpoint", {"message": "m", "set_current": True}),
            ("GET", "/v1/projects/p/checkpoints", None),
            ("GET", "/v1/projects/p/checkpoints/2", None),
            ("DELETE", "/v1/projects/p/checkpoints/2", None),
            ("POST", "/v1/projects/p/volumes/w/restore", {"checkpoint": 2}),
            ("POST", "/v1/projects/p/instances", {"checkpoint": 2}),
        ])
        self.assertTrue(r.requests[0][2].get("Idempotency-Key"), "a checkpoint is a creating call")

    def test_hibernate_with_memory(self):
        hib = {"id": "p-1", "state": "Stopped", "hibernated_version": 2, "hibernated_checkpoint": 3}
        r, c = self.serve([(200, hib, {}), (200, hib, {})])
        self.assertEqual(c.hibernate("p-1", memory=True)["hibernated_checkpoint"], 3)
        c.hibernate("p-1")
        got = [(m, path, json.loads(b) if b else None) for m, path, _, b in r.requests]
        self.assertEqual(got, [
            ("POST", "/v1/instances/p-1/hibernate", {"memory": True}),
            ("POST", "/v1/instances/p-1/hibernate", None),
        ])


if __name__ == "__main__":
    unittest.main()


class NodesTest(unittest.TestCase):
    def test_node_routes(self):
        node = {"name": "n 1", "state": "ready"}
        r = Recorder([(200, {"nodes": [node]}, {}), (200, node, {}), (200, node, {}), (200, node, {}), (200, node, {}),
                      (200, {"command": "envd serve", "args": ["envd", "serve"]}, {}),
                      (200, {"every": "15m"}, {}), (200, {"every": "0"}, {})])
        self.addCleanup(r.server.close)
        c = envd.Client(r.url, "tok")
        self.addCleanup(c.close)
        self.assertEqual(c.list_nodes(), [node])
        self.assertEqual(c.get_node("n 1")["name"], "n 1")
        c.cordon_node("n1")
        c.uncordon_node("n1")
        c.drain_node("n1")
        self.assertEqual(c.join_command()["command"], "envd serve")
        self.assertEqual(c.set_checkpoint_every("p", "15m"), {"every": "15m"})
        self.assertEqual(c.get_checkpoint_every("p"), {"every": "0"})
        self.assertEqual([(m, p) for m, p, _, _ in r.requests], [
            ("GET", "/v1/nodes"), ("GET", "/v1/nodes/n%201"), ("POST", "/v1/nodes/n1/cordon"),
            ("POST", "/v1/nodes/n1/uncordon"), ("POST", "/v1/nodes/n1/drain"), ("GET", "/v1/cluster/join-command"),
            ("PUT", "/v1/projects/p/checkpoint"), ("GET", "/v1/projects/p/checkpoint")])
