"""Integration tests against a live envd: ENVD_URL, ENVD_TOKEN (an admin
token) and ENVD_IMAGE (an imported busybox-like base image with sh) must be
set; without them these tests fail, they never skip. Every run uses fresh
project, image and tenant names, so reruns against one server do not
collide."""

import gzip
import io
import json
import os
import re
import secrets
import socket
import tarfile
import threading
import time
import unittest

import _support

import envd

ENV_VARS = ("ENVD_URL", "ENVD_TOKEN", "ENVD_IMAGE")
RUN = secrets.token_hex(3)


def live_env():
    missing = [v for v in ENV_VARS if not os.environ.get(v)]
    if missing:
        raise AssertionError("integration tests need %s in the environment (missing: %s)" % (", ".join(ENV_VARS), ", ".join(missing)))
    return os.environ["ENVD_URL"], os.environ["ENVD_TOKEN"], os.environ["ENVD_IMAGE"]


class DroppingProxy:
    """A TCP proxy to envd that cuts the first `drops` event streams right
    after the first complete event with an id it forwarded, and records the
    Last-Event-ID of each event-stream request."""

    def __init__(self, target_url, drops):
        m = re.match(r"https?://([^:/]+):(\d+)", target_url)
        self.target = (m.group(1), int(m.group(2)))
        self.drops = drops
        self.cursors = []
        self.lock = threading.Lock()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.url = "http://127.0.0.1:%d" % self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self):
        self.sock.close()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, client):
        upstream = socket.create_connection(self.target)
        req = b""
        while b"\r\n\r\n" not in req:
            b = client.recv(65536)
            if not b:
                client.close()
                upstream.close()
                return
            req += b
        head = req.split(b"\r\n\r\n")[0].decode("latin-1")
        is_events = " /v1/operations/" in head.split("\r\n")[0] and "/events" in head.split("\r\n")[0]
        if is_events:
            cursor = re.search(r"(?im)^last-event-id:\s*(\S+)", head)
            with self.lock:
                self.cursors.append(cursor.group(1) if cursor else None)
        upstream.sendall(req)
        threading.Thread(target=self._pipe, args=(client, upstream), daemon=True).start()
        cut = False
        with self.lock:
            if is_events and self.drops > 0:
                self.drops -= 1
                cut = True
        seen = b""
        try:
            while True:
                b = upstream.recv(65536)
                if not b:
                    break
                if cut:
                    seen += b
                    body_at = seen.find(b"\r\n\r\n")
                    idx = seen.find(b"\nid: ", body_at) if body_at >= 0 else -1
                    end = seen.find(b"\n\n", idx) if idx >= 0 else -1
                    if end >= 0:
                        keep = len(b) - (len(seen) - (end + 2))
                        client.sendall(b[:keep])
                        break
                client.sendall(b)
        except OSError:
            pass
        for s in (client, upstream):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    @staticmethod
    def _pipe(src, dst):
        try:
            while True:
                b = src.recv(65536)
                if not b:
                    break
                dst.sendall(b)
        except OSError:
            pass


def tiny_tar(files):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def ed25519_public_key():
    """An ed25519 public key in authorized_keys form (a random point is not
    needed: the server parses the wire form and takes any 32 bytes)."""
    import base64
    import struct

    def s(b):
        return struct.pack("!I", len(b)) + b
    return "ssh-ed25519 " + base64.b64encode(s(b"ssh-ed25519") + s(secrets.token_bytes(32))).decode()


class LiveTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.url, cls.token, cls.image = live_env()
        cls.c = envd.Client(cls.url, cls.token)
        cls.instances = []
        cls.projects = []

    @classmethod
    def tearDownClass(cls):
        for i in cls.instances:
            try:
                cls.c.delete_instance(i)
            except envd.EnvdError:
                pass
        for p in cls.projects:
            try:
                cls.c.delete_project(p)
            except envd.EnvdError:
                pass
        cls.c.close()

    def project(self, prefix, **kw):
        name = "sdkpy-%s-%s" % (prefix, RUN)
        p = self.c.create_project(name, self.image, **kw)
        self.projects.append(name)
        return p

    def up(self, project, **kw):
        inst = self.c.up(project, **kw)
        self.instances.append(inst["id"])
        self.assertEqual(inst["state"], "Running")
        return inst

    def sh(self, inst, script, **kw):
        return self.c.exec(inst["id"], ["sh", "-c", script], **kw)

    # ------------------------------------------------------------------

    def test_info_images_import_and_migration(self):
        info = self.c.info()
        self.assertTrue(info["version"])
        self.assertTrue(info["node"])
        self.assertEqual(self.c.healthz(), {"status": "ok"})
        self.assertIn(self.image, [i["name"] for i in self.c.list_images()])
        self.assertIn("envd_instances", self.c.metrics())

        name = "sdkpy-img-" + RUN
        img = self.c.import_image(name, tiny_tar({"etc/sdk-base": b"B\n"}))
        self.assertEqual(img["name"], name)
        self.assertTrue(img["digest"].startswith("sha256:"))
        # docs/api.md says 409 already_exists; the server moves the name to
        # the new image (reported in docs/notes/clients.md, "Python SDK").
        moved = self.c.import_image(name, tiny_tar({"etc/sdk-base": b"B\n", "etc/other": b"x"}))
        self.assertNotEqual(moved["digest"], img["digest"])
        gz = self.c.import_image(name + "-gz", io.BytesIO(gzip.compress(tiny_tar({"etc/gz": b"gz\n"}))))
        self.assertEqual(gz["name"], name + "-gz")
        names = [i["name"] for i in self.c.list_images()]
        self.assertIn(name, names)
        self.assertIn(name + "-gz", names)

        # A migration of a project's current version onto the new image.
        p = self.project("migrate")["name"]
        op = self.c.migrate(p, name)
        self.assertEqual(op["kind"], "migrate")
        res = self.c.wait_result(op, timeout=300)
        self.assertEqual((res["project"], res["from"], res["version"], res["current"]), (p, 1, 2, False))
        self.assertEqual(self.c.get_version(p, 2)["kind"], "migration")
        op = self.c.migrate(p, name, switch=True)
        # version 1 still sits on the old base; with switch the new one is
        # current unless current moved meanwhile
        res = self.c.wait_result(op, timeout=300)
        self.assertTrue(res["current"])
        self.assertEqual(self.c.get_project(p)["current_version"], res["version"])
        # Migrating again onto the base the current version sits on is
        # refused at once (409 failed_precondition).
        with self.assertRaises(envd.FailedPrecondition):
            self.c.migrate(p, name)

    def test_project_exec_save_rollback_and_events(self):
        key = envd.new_idempotency_key()
        name = "sdkpy-main-" + RUN
        p = self.c.create_project(name, self.image, excludes=["/tmp"], idempotency_key=key)
        self.projects.append(name)
        self.assertEqual((p["name"], p["current_version"]), (name, 1))
        again = self.c.create_project(name, self.image, excludes=["/tmp"], idempotency_key=key)
        self.assertEqual(again["created_at"], p["created_at"], "a retry with the key is the same project")
        with self.assertRaises(envd.IdempotencyKeyReused) as cm:
            self.c.create_project(name, self.image, idempotency_key=key)
        self.assertEqual(cm.exception.status, 422)
        with self.assertRaises(envd.AlreadyExists):
            self.c.create_project(name, self.image)
        self.assertIn(name, [x["name"] for x in self.c.list_projects()])

        inst = self.up(name, ttl="30m")
        self.assertTrue(inst["expires_at"])
        r = self.sh(inst, "echo one > /root/state && cat /root/state")
        self.assertEqual((r["exit_code"], r["stdout"]), (0, "one\n"))
        r = self.sh(inst, "echo oops >&2; exit 7")
        self.assertEqual((r["exit_code"], r["stderr"]), (7, "oops\n"), "a non-zero exit is an answer, not an error")
        r = self.c.exec(inst["id"], ["cat"], stdin="from stdin", env=["A=1"], cwd="/root")
        self.assertEqual(r["stdout"], "from stdin")
        with self.assertRaises(envd.DeadlineExceeded):
            self.sh(inst, "sleep 5", timeout=1)

        # Save, following the events through a proxy that drops the stream
        # twice: every event arrives once, in order.
        save_key = envd.new_idempotency_key()
        op = self.c.save(inst["id"], message="one", idempotency_key=save_key)
        self.assertEqual(op["kind"], "save")
        self.assertEqual(self.c.save(inst["id"], message="one", idempotency_key=save_key)["id"], op["id"],
                         "a retry with the key is the same operation")
        proxy = DroppingProxy(self.url, drops=2)
        self.addCleanup(proxy.close)
        pc = envd.Client(proxy.url, self.token, max_retry_wait=0.2)
        self.addCleanup(pc.close)
        stream = pc.events(op)
        seqs = [ev["seq"] for ev in stream]
        self.assertEqual(seqs, list(range(1, len(seqs) + 1)), "no gap, no duplicate")
        self.assertGreaterEqual(len(seqs), 3)
        self.assertEqual(stream.reconnects, 2)
        self.assertEqual(proxy.cursors[:3], [None, "1", "2"], "each reconnect resumes after the last event seen")
        self.assertEqual(stream.operation["state"], "succeeded")
        res = stream.operation["result"]
        self.assertEqual((res["version"], res["current"], res["conflict"]), (2, True, False))
        self.assertEqual([e["seq"] for e in self.c.operation_events(op["id"])], seqs)
        self.assertEqual([e["seq"] for e in self.c.operation_events(op["id"], after=2)], seqs[2:])
        self.assertEqual(self.c.cancel_operation(op["id"])["state"], "succeeded", "a finished operation stays as it is")

        # One client, several threads.
        results = []

        def run(n):
            for k in range(4):
                results.append(self.c.exec(inst["id"], ["echo", "%d-%d" % (n, k)])["stdout"])
        threads = [threading.Thread(target=run, args=(n,)) for n in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(sorted(results), sorted("%d-%d\n" % (n, k) for n in range(6) for k in range(4)))

        self.sh(inst, "echo two > /root/state")
        seen = []
        res = self.c.wait_result(self.c.save(inst["id"], message="two"), on_event=seen.append)
        self.assertEqual((res["version"], res["current"]), (3, True))
        self.assertTrue(seen)
        self.assertEqual(self.c.get_operation(op["id"])["state"], "succeeded")

        versions = self.c.list_versions(name)
        self.assertEqual([v["version"] for v in versions], [1, 2, 3])
        self.assertTrue(self.c.get_version(name, 3)["current"])
        # A second save of an instance replaces its one layer over the
        # version it started from: version 3's parent is 1, like 2's.
        ch = self.c.version_changes(name, 3)
        self.assertEqual((ch["version"], ch["against"]), (3, 1))
        self.assertIn("/root/state", [f["path"] for f in ch["added"]])
        ch = self.c.version_changes(name, 3, against=2, limit=5)
        self.assertEqual([f["path"] for f in ch["modified"]], ["/root/state"])
        self.sh(inst, "echo pending > /root/new")
        pending = self.c.instance_changes(inst["id"])
        self.assertIn("/root/new", [f["path"] for f in pending["added"]])
        self.assertIn("/tmp", [e["path"] for e in pending["excluded"]])

        # Roll back: switch current to version 2, a compare-and-swap.
        proj = self.c.set_current(name, 2, expected_current=3)
        self.assertEqual(proj["current_version"], 2)
        with self.assertRaises(envd.Conflict):
            self.c.set_current(name, 3, expected_current=3)
        with self.assertRaises(envd.NotFound):
            self.c.set_current(name, 99, expected_current=2)
        back = self.up(name)
        self.assertEqual(back["version"], 2)
        self.assertEqual(self.sh(back, "cat /root/state")["stdout"], "one\n")

        self.assertTrue(self.c.pin_version(name, 2)["pinned"])
        self.assertFalse(self.c.unpin_version(name, 2)["pinned"])
        self.assertEqual(self.c.set_retention(name, keep_last=5, keep_newer_than="24h")["retention"],
                         {"keep_last": 5, "keep_newer_than": "24h0m0s"})
        self.assertNotIn("retention", self.c.set_retention(name))
        lim = self.c.set_limits(name, memory_bytes=256 << 20, pids=512)["limits"]
        self.assertEqual((lim["memory_bytes"], lim["pids"]), (256 << 20, 512))
        net = self.c.set_network(name, "none", isolate_instances=True)
        self.assertEqual((net["egress"], net["isolate_instances"]), ("none", True))
        with self.assertRaises(envd.InvalidArgument):
            self.c.set_network(name, "allow:::1")
        with self.assertRaises(envd.FailedPrecondition):
            self.c.delete_project(name)  # live instances
        with self.assertRaises(envd.NotFound):
            self.c.get_project("sdkpy-missing-" + RUN)

    def test_instance_lifecycle(self):
        p = self.project("life")["name"]
        op = self.c.up(p, wait=False, retain=True)
        self.assertEqual(op["kind"], "restore")
        inst = self.c.wait_result(op, timeout=600)
        self.instances.append(inst["id"])
        self.assertEqual((inst["id"], inst["state"], inst["retain"]), (op["target"], "Running", True))
        iid = inst["id"]
        self.assertIn(iid, [i["id"] for i in self.c.list_instances(p)])
        self.assertIn(iid, [i["id"] for i in self.c.list_instances()])

        self.assertEqual(self.c.pause(iid)["state"], "Paused")
        with self.assertRaises(envd.FailedPrecondition) as cm:
            self.c.exec(iid, ["true"])
        self.assertEqual(cm.exception.state, "Paused")
        with self.assertRaises(envd.FailedPrecondition) as cm:
            self.c.exec_stream(iid, ["true"])
        self.assertEqual(cm.exception.state, "Paused")
        self.assertEqual(self.c.resume(iid)["state"], "Running")
        self.assertEqual(self.c.stop(iid)["state"], "Stopped")
        with self.assertRaises(envd.FailedPrecondition):
            self.c.stop(iid)
        started = self.c.start(iid)
        self.assertEqual((started["state"], started["generation"]), ("Running", inst["generation"] + 1))
        with self.assertRaises(envd.StaleGeneration) as cm:
            self.c.exec(iid, ["true"], generation=inst["generation"])
        self.assertEqual(cm.exception.details.get("generation"), started["generation"])
        self.assertEqual(self.c.exec(iid, ["true"], generation=started["generation"])["exit_code"], 0)
        self.assertTrue(self.c.renew(iid, "2h")["expires_at"])
        self.assertNotIn("expires_at", self.c.renew(iid, "none"))
        with self.assertRaises(envd.InvalidArgument):
            self.c.renew(iid, "soon")
        self.c.stop(iid)
        hib = self.c.hibernate(iid)
        self.assertEqual((hib["state"], hib["reason"]), ("Stopped", "hibernated"))
        self.assertTrue(hib["hibernated_version"])
        gone = self.c.delete_instance(iid)
        self.assertEqual((gone["state"], gone["reason"]), ("Terminated", "user_delete"))
        self.assertEqual(self.c.delete_instance(iid)["state"], "Terminated")
        with self.assertRaises(envd.NotFound):
            self.c.get_instance("sdkpy-none-" + RUN)

    def test_exec_stream(self):
        p = self.project("stream")["name"]
        iid = self.up(p)["id"]
        out, err = io.BytesIO(), io.BytesIO()
        data = b"line of input\n" * 5000
        code = self.c.exec_stream(iid, ["sh", "-c", "cat; echo err >&2; exit 3"], stdin=data, stdout=out, stderr=err)
        self.assertEqual((code, out.getvalue(), err.getvalue()), (3, data, b"err\n"))

        with self.c.exec_session(iid, ["sh", "-c", "stty size"], tty=True, cols=120, rows=40) as s:
            code, o, e = s.output()
        self.assertEqual((code, o.strip()), (0, b"40 120"))

        with self.c.exec_session(iid, ["sh"], tty=True, cols=80, rows=24, token_in_subprotocol=True) as s:
            s.write("echo $((6*7))\n")
            got = b""
            while b"42" not in got:
                m = s.recv()
                self.assertIsNotNone(m, "the shell exited early: %r" % got)
                got += m[1]
            # A resize is asynchronous, like SIGWINCH: ask until the new
            # size shows, then exit.
            s.resize(100, 30)
            seen = b""
            deadline = time.monotonic() + 30
            while b"30 100" not in seen:
                self.assertLess(time.monotonic(), deadline, "the new size never showed: %r" % seen)
                s.write("stty size\n")
                time.sleep(0.05)
                m = s.recv()
                self.assertIsNotNone(m, "the shell exited early: %r" % seen)
                seen += m[1]
            s.write("exit 4\n")
            b"".join(d for _, d in s)
            self.assertEqual(s.exit_code, 4)

        with self.c.exec_session(iid, ["cat"]) as s:
            s.write(b"abc")
            s.close_stdin()
            self.assertEqual(s.output(), (0, b"abc", b""))

        with self.assertRaises(envd.NotFound):
            self.c.exec_stream("sdkpy-none-" + RUN, ["true"])
        with self.assertRaises(envd.InvalidArgument):
            self.c.exec_session(iid, ["sh"], tty=True, cols=0, rows=0)

    def test_volumes_and_archives(self):
        p = self.project("vol", volumes=["work:/work"])["name"]
        proj = self.c.add_volume(p, "cache:/cache", path_add=["/cache/bin"])
        self.assertEqual(sorted(v["name"] for v in proj["volumes"]), ["cache", "work"])
        with self.assertRaises(envd.InvalidArgument):
            self.c.add_volume(p, "bad:relative/path")
        inst = self.up(p)
        self.sh(inst, "echo v1 > /work/data")
        vols = {v["name"]: v for v in self.c.list_volumes(p)}
        self.assertEqual(vols["work"]["path"], "/work")
        arc = self.c.archive_volume(p, "work", name="snap")
        self.assertEqual((arc["name"], arc["volume"], arc["project"]), ("snap", "work", p))
        self.assertGreater(arc["bytes"], 0)
        with self.assertRaises(envd.AlreadyExists):
            self.c.archive_volume(p, "work", name="snap")
        self.assertTrue(self.c.archive_volume(p, "work", name="snap", replace=True)["replaced"])
        self.sh(inst, "echo v2 > /work/data")
        with self.assertRaises(envd.FailedPrecondition):
            self.c.restore_volume(p, "work", name="snap")  # a live instance
        self.c.delete_instance(inst["id"])
        self.c.restore_volume(p, "work", name="snap")
        self.assertEqual(self.sh(self.up(p), "cat /work/data")["stdout"], "v1\n")
        self.assertEqual([a["name"] for a in self.c.list_archives(p, "work")], ["snap"])
        self.assertEqual([a["name"] for a in self.c.list_archives(p)], ["snap"])
        self.assertEqual(self.c.delete_archive(p, "work", "snap")["name"], "snap")
        self.assertEqual(self.c.list_archives(p), [])
        for i in self.c.list_instances(p):
            self.c.delete_instance(i["id"])
        self.assertEqual([v["name"] for v in self.c.remove_volume(p, "cache").get("volumes", [])], ["work"])

    def test_tokens_quota_and_usage(self):
        tenant = "sdkpy-" + RUN
        tok = self.c.create_token(tenant, expires_in="1h")
        self.assertEqual((tok["tenant"], tok["admin"]), (tenant, False))
        self.assertTrue(tok["expires_at"])
        self.assertIn(tok["id"], [t["id"] for t in self.c.list_tokens(tenant)])
        self.assertNotIn("token", self.c.list_tokens(tenant)[0])
        tc = envd.Client(self.url, tok["token"])
        self.addCleanup(tc.close)
        self.assertEqual(tc.usage()["tenant"], tenant)
        self.assertEqual([t["id"] for t in tc.list_own_tokens()], [tok["id"]])
        with self.assertRaises(envd.PermissionDenied):
            tc.list_tokens()
        with self.assertRaises(envd.PermissionDenied):
            tc.gc(dry_run=True)
        with self.assertRaises(envd.PermissionDenied):
            tc.metrics()

        q = self.c.set_quota(tenant, max_ttl="1h", max_instances=2)
        self.assertEqual(q["max_instances"], 2)
        p = "sdkpy-tenant-" + RUN
        tc.create_project(p, self.image)
        try:
            with self.assertRaises(envd.QuotaExceeded) as cm:
                tc.up(p, ttl="none")
            self.assertEqual(cm.exception.status, 507)
            self.assertEqual(cm.exception.details.get("quota"), "ttl_seconds")
            usage = self.c.usage(tenant)
            self.assertEqual((usage["tenant"], usage["quota"]["max_instances"]), (tenant, 2))
        finally:
            tc.delete_project(p)

        second = self.c.create_token(tenant)
        revoked = tc.revoke_own_token(tok["id"])
        self.assertTrue(revoked["revoked_at"])
        with self.assertRaises(envd.Unauthenticated):
            tc.usage()
        self.assertTrue(self.c.revoke_token(second["id"])["revoked_at"])
        self.assertTrue(self.c.revoke_token(second["id"])["revoked_at"], "revoking again answers it as it is")

    def test_readme_example(self):
        """The README's example, run as a program outside the package would
        run it."""
        import subprocess
        import sys
        root = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
        with open(os.path.join(root, "README.md"), encoding="utf-8") as f:
            readme = f.read()
        section = readme.split("\n## Example\n", 1)[1]
        code = section.split("```python\n", 1)[1].split("```", 1)[0]
        env = dict(os.environ, PYTHONPATH=root)
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=900)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertIn("exit 0 stdout hello", out.stdout)
        self.assertIn("after rollback: hello", out.stdout)
        self.assertRegex(out.stdout, r"save succeeded after \d+ reconnect")
        seqs = [int(m) for m in re.findall(r"(?m)^event (\d+) ", out.stdout)]
        self.assertEqual(seqs, list(range(1, len(seqs) + 1)))

    def test_build_and_gc(self):
        p = self.project("build")["name"]
        with self.assertRaises(envd.InvalidArgument):
            self.c.build(p, "apk", ["$(reboot)"])
        # The base has no package manager: the build fails, as an operation.
        op = self.c.build(p, "apk", ["curl"])
        self.assertEqual(op["kind"], "build")
        done = self.c.wait(op, timeout=600)
        self.assertEqual(done["state"], "failed")
        self.assertTrue(done["error"]["code"])
        with self.assertRaises(envd.EnvdError):
            self.c.wait_result(op)

        # A spec of files and run steps: its output is the operation's log.
        op = self.c.build_spec(p, {"files": [{"path": "/etc/sdk-spec", "content": "py\n"}],
                                   "run": [{"args": ["cat", "/etc/sdk-spec"]}]})
        built = self.c.wait_result(op, timeout=600)
        self.assertIn("py", self.c.operation_logs(op))
        self.assertTrue(self.c.version_spec(p, built["version"])["declared"])

        res = self.c.wait_result(self.c.gc(dry_run=True), timeout=600)
        self.assertIn("versions", res)
        self.assertTrue(res.get("dry_run"))
        with self.assertRaises(envd.NotFound):
            self.c.get_operation("op-sdkpy-none")

    # ------------------------------------------------------------------
    # Files, ports, SSH, export, rollouts (SDK parity)

    def test_readyz(self):
        r = self.c.readyz()
        self.assertEqual(r["status"], "ready")
        self.assertTrue(r["checks"])

    def test_files(self):
        p = self.project("files")["name"]
        iid = self.up(p, ttl="30m")["id"]
        w = self.c.write_file(iid, "/srv/sdk/a.txt", b"hello world\n", mkdir=True, mode="0600")
        self.assertEqual((w["path"], w["size"], w["mode"]), ("/srv/sdk/a.txt", 12, "0600"))
        self.c.make_dir(iid, "/srv/sdk/sub/deeper", parents=True)
        self.c.copy_file(iid, "/srv/sdk/a.txt", "/srv/sdk/sub/b.txt")
        self.c.move_file(iid, "/srv/sdk/sub/b.txt", "/srv/sdk/sub/deeper/c.txt")
        listing = self.c.list_files(iid, "/srv/sdk")
        self.assertEqual(sorted((e["name"], e["type"]) for e in listing["entries"]), [("a.txt", "file"), ("sub", "dir")])
        part = self.c.read_file(iid, "/srv/sdk/a.txt", offset=6, length=5)
        self.assertEqual((part["data"], part["offset"], part["size"]), (b"world", 6, 12))
        self.assertTrue(part["content_type"].startswith("text/plain"), part["content_type"])
        self.assertEqual(self.c.read_file(iid, "/srv/sdk/sub/deeper/c.txt")["data"], b"hello world\n")
        with self.assertRaises(envd.InvalidArgument):
            self.c.read_file(iid, "/srv/sdk")

        tar = self.c.download_files(iid, "/srv/sdk")
        with tarfile.open(fileobj=io.BytesIO(tar)) as t:
            names = {m.name.lstrip("./"): m for m in t.getmembers()}
            self.assertEqual(t.extractfile(names["sub/deeper/c.txt"]).read(), b"hello world\n")
        # Elsewhere: into a second instance of the project.
        other = self.up(p, ttl="30m")["id"]
        up = self.c.upload_files(other, "/srv/copy", io.BytesIO(tar), mkdir=True)
        self.assertGreaterEqual(up["entries"], 4)
        self.assertEqual(self.c.read_file(other, "/srv/copy/sub/deeper/c.txt")["data"], b"hello world\n")
        self.c.delete_instance(other)
        self.c.upload_files(iid, "/srv/copy", tar, mkdir=True)
        self.assertEqual(self.c.read_file(iid, "/srv/copy/a.txt")["data"], b"hello world\n")
        out = io.BytesIO()
        n = self.c.download_files(iid, "/srv/sdk", out, format="tar.zst")
        self.assertEqual((n, out.getvalue()[:4]), (len(out.getvalue()), b"\x28\xb5\x2f\xfd"))

        self.c.delete_file(iid, "/srv/copy", recursive=True)
        with self.assertRaises(envd.NotFound):
            self.c.list_files(iid, "/srv/copy")

        # watch: the atomic write shows as its temporary file, then the rename.
        self.c.make_dir(iid, "/srv/watched")
        seen = []
        done = threading.Event()

        def watch():
            for ev in self.c.watch_files(iid, "/srv/watched", timeout=30):
                seen.append(ev)
                if ev["path"] == "/srv/watched/new.txt":
                    done.set()
                    return
        threading.Thread(target=watch, daemon=True).start()
        time.sleep(0.6)
        self.c.write_file(iid, "/srv/watched/new.txt", "x")
        self.assertTrue(done.wait(20), seen)
        self.assertIn(seen[-1]["type"], ("create", "move"))

    def test_ports_and_tunnel(self):
        p = self.project("ports")["name"]
        inst = self.up(p, ttl="30m")
        self.sh(inst, "mkdir -p /www && echo hi-from-httpd > /www/index.html && httpd -p 127.0.0.1:8080 -h /www")
        for _ in range(100):
            ports = self.c.list_ports(inst["id"])
            if any(x["port"] == 8080 for x in ports):
                break
            time.sleep(0.2)
        self.assertIn(8080, [x["port"] for x in ports])
        res = self.c.proxy(inst["id"], 8080, "/index.html")
        self.assertEqual((res["status"], res["body"]), (200, b"hi-from-httpd\n"))
        self.assertEqual(self.c.proxy(inst["id"], 8080, "/nope.html")["status"], 404)
        res = self.c.proxy(inst["id"], 8099, "/")
        self.assertEqual(res["status"], 502)
        self.assertEqual(json.loads(res["body"])["error"]["code"], "port_unreachable")

        tok = self.c.preview_url(inst["id"], 8080, ttl="10m")
        self.assertGreater(len(tok["token"]), 10)
        self.assertEqual(self.c.set_public_ports(p, [8080])["public"], [8080])
        self.assertEqual(self.c.public_ports(p)["public"], [8080])
        self.assertEqual(self.c.set_public_ports(p, [])["public"], [])

        with self.c.tunnel(inst["id"], 8080) as t:
            t.send(b"GET /index.html HTTP/1.0\r\nHost: x\r\n\r\n")
            t.close_write()
            answer = t.read_all()
        self.assertRegex(answer, rb"^HTTP/1\.[01] 200")
        self.assertIn(b"hi-from-httpd", answer)
        with self.assertRaises(envd.PortUnreachable):
            self.c.tunnel(inst["id"], 8099)

    def test_ssh_keys_and_stream(self):
        key = self.c.add_ssh_key(ed25519_public_key(), name="sdkpy-" + RUN)
        self.assertTrue(key["fingerprint"].startswith("SHA256:"))
        self.assertIn(key["id"], [k["id"] for k in self.c.list_ssh_keys()])
        self.assertEqual(self.c.delete_ssh_key(key["id"])["id"], key["id"])
        self.assertNotIn(key["id"], [k["id"] for k in self.c.list_ssh_keys()])
        with self.assertRaises(envd.InvalidArgument):
            self.c.add_ssh_key("not a key")

        p = self.project("ssh")["name"]
        iid = self.up(p, ttl="30m")["id"]
        with self.c.ssh(iid) as s:
            banner = b""
            while b"\n" not in banner:
                b = s.recv()
                self.assertTrue(b, "the stream ended before the banner")
                banner += b
        self.assertTrue(banner.startswith(b"SSH-2.0-"), banner)
        with self.assertRaises(envd.NotFound):
            self.c.ssh(iid + "-missing")

    def test_export_and_validation(self):
        p = self.project("export")["name"]
        tar = self.c.export_version(p, 1)
        with tarfile.open(fileobj=io.BytesIO(tar)) as t:
            names = {m.name.lstrip("./") for m in t.getmembers()}
            self.assertIn("oci-layout", names)
            self.assertIn("index.json", names)
            self.assertEqual(json.loads(t.extractfile("oci-layout").read())["imageLayoutVersion"], "1.0.0")
        self.assertTrue(any(n.startswith("blobs/sha256/") for n in names))
        img = self.c.import_image("sdkpy-oci-" + RUN, tar)
        self.assertTrue(img["digest"].startswith("sha256:"))
        with self.assertRaises(envd.InvalidArgument):
            self.c.pull_image("sdkpy-pull-" + RUN, "NOT A REFERENCE::")

        cmds = [["true"], ["sh", "-c", "test -d /etc"]]
        self.assertEqual(self.c.set_validation(p, cmds)["validate"], cmds)
        self.assertEqual(self.c.get_validation(p), {"validate": cmds})
        with self.assertRaises(envd.InvalidArgument):
            self.c.set_validation(p, [[]])
        self.c.set_validation(p, [])

    def test_rollout_dry_run(self):
        a, b = "sdkpy-ro-a-" + RUN, "sdkpy-ro-b-" + RUN
        self.c.import_image(a, tiny_tar({"etc/base": b"a\n"}))
        self.c.import_image(b, tiny_tar({"etc/base": b"b\n"}))
        name = "sdkpy-ro-" + RUN
        self.c.create_project(name, a)
        self.projects.append(name)
        tenant = self.c.usage()["tenant"]
        ro = self.c.create_rollout(a, b, tenant=tenant, selector=name, dry_run=True)
        self.assertTrue(ro["dry_run"])
        self.assertIn(ro["id"], [r["id"] for r in self.c.list_rollouts()])
        got = self.c.get_rollout(ro["id"])
        deadline = time.monotonic() + 120
        while got["state"] == "running" and time.monotonic() < deadline:
            time.sleep(0.2)
            got = self.c.get_rollout(ro["id"])
        self.assertEqual(got["state"], "succeeded", got.get("message"))
        self.assertEqual([(x["project"], x["status"]) for x in got["projects"]], [(name, "clean")])
        with self.assertRaises(envd.EnvdError) as cm:
            self.c.pause_rollout(ro["id"])
        self.assertEqual(cm.exception.status, 409)


if __name__ == "__main__":
    unittest.main()
