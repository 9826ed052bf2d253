"""Every operation of docs/openapi.yaml is reached by a method of the SDK.

ROUTES is the one table of "METHOD /path" (as the spec writes it) -> the
Client method that calls it, with a call of that method. The test checks it
both ways against the spec (every operation has an entry; every entry is an
operation of the spec and names a method of Client), then makes each call
against a recording server and checks that it sends that method to a path
of that template. A route added to the spec without a method fails here.
"""

import json
import os
import re
import unittest

import _support

import envd

SPEC = os.path.join(os.path.dirname(__file__), "..", "..", "..", "docs", "openapi.yaml")

# The plain instance verbs (api/types/instance_verbs.json, types.InstanceVerbs).
with open(os.path.join(os.path.dirname(__file__), "..", "..", "..", "api", "types", "instance_verbs.json"),
          encoding="utf-8") as _f:
    INSTANCE_VERBS = json.load(_f)


def spec_operations(text):
    """"METHOD /path" of every operation under paths: (paths at two spaces, methods at four)."""
    ops, in_paths, path = [], False, None
    for line in text.splitlines():
        if line[:1].strip():
            in_paths = line.startswith("paths:")
            continue
        if not in_paths:
            continue
        m = re.match(r"^  (/\S*):\s*$", line)
        if m:
            path = m.group(1)
            continue
        m = re.match(r"^    (get|put|post|delete|patch|head|options|trace):\s*$", line)
        if m and path:
            ops.append(f"{m.group(1).upper()} {path}")
    return ops


# Operations the SDK deliberately does not wrap, each with its reason. Keep
# it short: a console may only use what the SDKs have.
EXCLUDED = {
    # The web console's page and files (api/console.go), served to browsers, not API calls.
    "GET /": "the web console: a redirect to /console/",
    "GET /console": "the web console: a redirect to /console/",
    "GET /console/": "the web console's page",
    "GET /console/{asset}": "the web console's scripts, stylesheet and icon",
    "GET /favicon.ico": "the web console's icon",
}

PROXY_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]

ROUTES = [
    ("GET /healthz", "healthz", lambda c: c.healthz()),
    ("GET /readyz", "readyz", lambda c: c.readyz()),
    ("GET /metrics", "metrics", lambda c: c.metrics()),
    ("POST /mcp", "mcp", lambda c: c.mcp({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})),
    ("GET /v1/info", "info", lambda c: c.info()),
    ("POST /v1/images", "import_image", lambda c: c.import_image("n", b"\0" * 1024)),
    ("GET /v1/images", "list_images", lambda c: c.list_images()),
    ("POST /v1/projects", "create_project", lambda c: c.create_project("p", "b")),
    ("GET /v1/projects", "list_projects", lambda c: c.list_projects()),
    ("GET /v1/projects/{p}", "get_project", lambda c: c.get_project("p")),
    ("DELETE /v1/projects/{p}", "delete_project", lambda c: c.delete_project("p")),
    ("POST /v1/projects/{p}/instances", "create_instance", lambda c: c.create_instance("p")),
    ("GET /v1/projects/{p}/instances", "list_instances", lambda c: c.list_instances("p")),
    ("GET /v1/instances", "list_instances", lambda c: c.list_instances()),
    ("GET /v1/instances/{i}", "get_instance", lambda c: c.get_instance("i")),
    ("DELETE /v1/instances/{i}", "delete_instance", lambda c: c.delete_instance("i")),
    # The plain verbs, one entry each, from the server's list: a verb added
    # there is covered by instance_verb without a line here.
    *[(f"POST /v1/instances/{{i}}/{v['name']}", "instance_verb", lambda c, n=v["name"]: c.instance_verb("i", n))
      for v in INSTANCE_VERBS],
    ("POST /v1/instances/{i}/hibernate", "hibernate", lambda c: c.hibernate("i", memory=True)),
    ("POST /v1/instances/{i}/renew", "renew", lambda c: c.renew("i", "1h")),
    ("POST /v1/instances/{i}/exec", "exec", lambda c: c.exec("i", ["true"])),
    ("GET /v1/instances/{i}/exec/ws", "exec_session", lambda c: c.exec_session("i", ["true"])),
    ("POST /v1/instances/{i}/save", "save", lambda c: c.save("i")),
    ("POST /v1/instances/{i}/fork", "fork", lambda c: c.fork("i")),
    ("POST /v1/projects/{p}/builds", "build", lambda c: c.build("p", "apk", ["curl"])),
    ("POST /v1/projects/{p}/migrations", "migrate", lambda c: c.migrate("p", "b")),
    ("GET /v1/projects/{p}/versions", "list_versions", lambda c: c.list_versions("p")),
    ("GET /v1/projects/{p}/versions/{n}", "get_version", lambda c: c.get_version("p", 1)),
    ("GET /v1/instances/{i}/changes", "instance_changes", lambda c: c.instance_changes("i")),
    ("GET /v1/projects/{p}/versions/{n}/changes", "version_changes", lambda c: c.version_changes("p", 2)),
    ("GET /v1/projects/{p}/versions/{n}/export", "export_version", lambda c: c.export_version("p", 1)),
    ("POST /v1/projects/{p}/versions/{n}/pin", "pin_version", lambda c: c.pin_version("p", 1)),
    ("DELETE /v1/projects/{p}/versions/{n}/pin", "unpin_version", lambda c: c.unpin_version("p", 1)),
    ("POST /v1/projects/{p}/current", "set_current", lambda c: c.set_current("p", 1, 2)),
    ("PUT /v1/projects/{p}/limits", "set_limits", lambda c: c.set_limits("p")),
    ("PUT /v1/projects/{p}/retention", "set_retention", lambda c: c.set_retention("p")),
    ("PUT /v1/projects/{p}/network", "set_network", lambda c: c.set_network("p", "none")),
    ("GET /v1/projects/{p}/egress/log", "egress_log", lambda c: c.egress_log("p", limit=10)),
    ("GET /v1/secrets", "list_secrets", lambda c: c.list_secrets()),
    ("PUT /v1/secrets/{s}", "set_secret", lambda c: c.set_secret("k", "v")),
    ("PUT /v1/secrets/{s}/binding", "bind_secret", lambda c: c.bind_secret("k", "api.example.org")),
    ("DELETE /v1/secrets/{s}", "delete_secret", lambda c: c.delete_secret("k")),
    ("GET /v1/projects/{p}/volumes", "list_volumes", lambda c: c.list_volumes("p")),
    ("POST /v1/projects/{p}/volumes", "add_volume", lambda c: c.add_volume("p", "w:/w")),
    ("DELETE /v1/projects/{p}/volumes/{v}", "remove_volume", lambda c: c.remove_volume("p", "w")),
    ("POST /v1/projects/{p}/volumes/{v}/archive", "archive_volume", lambda c: c.archive_volume("p", "w")),
    ("POST /v1/projects/{p}/volumes/{v}/restore", "restore_volume", lambda c: c.restore_volume("p", "w", name="a")),
    ("GET /v1/projects/{p}/archives", "list_archives", lambda c: c.list_archives("p")),
    ("GET /v1/projects/{p}/volumes/{v}/archives", "list_archives", lambda c: c.list_archives("p", "w")),
    ("DELETE /v1/projects/{p}/volumes/{v}/archives/{name}", "delete_archive", lambda c: c.delete_archive("p", "w", "a")),
    ("POST /v1/admin/gc", "gc", lambda c: c.gc()),
    ("GET /v1/operations/{id}", "get_operation", lambda c: c.get_operation("op")),
    ("DELETE /v1/operations/{id}", "cancel_operation", lambda c: c.cancel_operation("op")),
    ("GET /v1/operations/{id}/events", "events", lambda c: c.operation_events("op")),
    ("GET /v1/usage", "usage", lambda c: c.usage()),
    ("GET /v1/admin/tenants/{t}/usage", "usage", lambda c: c.usage("t")),
    ("PUT /v1/admin/tenants/{t}/quota", "set_quota", lambda c: c.set_quota("t")),
    ("POST /v1/admin/tenants/{t}/tokens", "create_token", lambda c: c.create_token("t")),
    ("GET /v1/admin/tenants/{t}/tokens", "tenant_tokens", lambda c: c.tenant_tokens("t")),
    ("GET /v1/admin/tokens", "list_tokens", lambda c: c.list_tokens()),
    ("DELETE /v1/admin/tokens/{id}", "revoke_token", lambda c: c.revoke_token(1)),
    ("GET /v1/tokens", "list_own_tokens", lambda c: c.list_own_tokens()),
    ("DELETE /v1/tokens/{id}", "revoke_own_token", lambda c: c.revoke_own_token(1)),
    ("POST /v1/admin/rollouts", "create_rollout", lambda c: c.create_rollout("a", "b")),
    ("GET /v1/admin/rollouts", "list_rollouts", lambda c: c.list_rollouts()),
    ("GET /v1/admin/rollouts/{id}", "get_rollout", lambda c: c.get_rollout("r")),
    ("POST /v1/admin/rollouts/{id}/pause", "pause_rollout", lambda c: c.pause_rollout("r")),
    ("POST /v1/admin/rollouts/{id}/resume", "resume_rollout", lambda c: c.resume_rollout("r")),
    ("POST /v1/admin/rollouts/{id}/cancel", "cancel_rollout", lambda c: c.cancel_rollout("r")),
    ("POST /v1/admin/rollouts/{id}/rollback", "rollback_rollout", lambda c: c.rollback_rollout("r")),
    ("PUT /v1/projects/{p}/validation", "set_validation", lambda c: c.set_validation("p", [])),
    ("PUT /v1/projects/{p}/idle", "set_idle", lambda c: c.set_idle("p")),
    ("PUT /v1/projects/{p}/runtime-class", "set_runtime_class", lambda c: c.set_runtime_class("p", "gvisor")),
    ("PUT /v1/projects/{p}/docker", "set_docker", lambda c: c.set_docker("p", True)),
    ("PUT /v1/projects/{p}/pool", "set_pool", lambda c: c.set_pool("p", 2)),
    ("POST /v1/instances/{i}/checkpoint", "checkpoint", lambda c: c.checkpoint("i", message="m")),
    ("GET /v1/projects/{p}/checkpoints", "list_checkpoints", lambda c: c.list_checkpoints("p")),
    ("GET /v1/projects/{p}/checkpoints/{id}", "get_checkpoint", lambda c: c.get_checkpoint("p", 3)),
    ("DELETE /v1/projects/{p}/checkpoints/{id}", "delete_checkpoint", lambda c: c.delete_checkpoint("p", 3)),
    ("GET /v1/projects/{p}/checkpoints/{id}/export", "export_checkpoint", lambda c: c.export_checkpoint("p", 3)),
    ("POST /v1/projects/{p}/checkpoints/import", "import_checkpoint", lambda c: c.import_checkpoint("p", b"tar")),
    ("GET /v1/projects/{p}/versions/{n}/spec", "version_spec", lambda c: c.version_spec("p", 3)),
    ("POST /v1/projects/{p}/build-contexts", "upload_build_context", lambda c: c.upload_build_context("p", b"x" * 10)),
    ("GET /v1/operations/{id}/logs", "operation_logs", lambda c: c.operation_logs("o")),
    ("GET /v1/nodes", "list_nodes", lambda c: c.list_nodes()),
    ("GET /v1/nodes/{name}", "get_node", lambda c: c.get_node("n")),
    ("POST /v1/nodes/{name}/cordon", "cordon_node", lambda c: c.cordon_node("n")),
    ("POST /v1/nodes/{name}/uncordon", "uncordon_node", lambda c: c.uncordon_node("n")),
    ("POST /v1/nodes/{name}/drain", "drain_node", lambda c: c.drain_node("n")),
    ("GET /v1/cluster/join-command", "join_command", lambda c: c.join_command()),
    ("POST /v1/cluster/join-tokens", "create_join_token", lambda c: c.create_join_token("10m")),
    ("POST /v1/cluster/join", "join", lambda c: c.join("n")),
    ("PUT /v1/projects/{p}/checkpoint", "set_checkpoint_every", lambda c: c.set_checkpoint_every("p", "15m")),
    ("GET /v1/projects/{p}/checkpoint", "get_checkpoint_every", lambda c: c.get_checkpoint_every("p")),
    ("GET /v1/instances/{i}/ports", "list_ports", lambda c: c.list_ports("i")),
    ("POST /v1/ssh-keys", "add_ssh_key", lambda c: c.add_ssh_key("ssh-ed25519 AAAA")),
    ("GET /v1/ssh-keys", "list_ssh_keys", lambda c: c.list_ssh_keys()),
    ("DELETE /v1/ssh-keys/{id}", "delete_ssh_key", lambda c: c.delete_ssh_key(1)),
    ("POST /v1/webhooks", "create_webhook", lambda c: c.create_webhook("https://hooks.example/h")),
    ("GET /v1/webhooks", "list_webhooks", lambda c: c.list_webhooks()),
    ("DELETE /v1/webhooks/{id}", "delete_webhook", lambda c: c.delete_webhook("wh_1")),
    ("POST /v1/webhooks/{id}/test", "test_webhook", lambda c: c.test_webhook("wh_1")),
    ("GET /v1/webhooks/{id}/deliveries", "webhook_deliveries", lambda c: c.webhook_deliveries("wh_1")),
    ("POST /v1/instances/{i}/ports/{port}/token", "preview_url", lambda c: c.preview_url("i", 8080)),
    ("GET /v1/instances/{i}/ssh", "ssh", lambda c: c.ssh("i")),
] + [
    (f"{m} /v1/instances/{{i}}/ports/{{port}}", "proxy", (lambda m: lambda c: c.proxy("i", 8080, "", method=m))(m))
    for m in PROXY_METHODS
] + [
    (f"{m} /v1/instances/{{i}}/ports/{{port}}/{{path}}", "proxy", (lambda m: lambda c: c.proxy("i", 8080, "/a/b?q=1", method=m))(m))
    for m in PROXY_METHODS
] + [
    ("GET /v1/instances/{i}/tcp/{port}", "tunnel", lambda c: c.tunnel("i", 8080)),
    ("GET /v1/projects/{p}/ports", "public_ports", lambda c: c.public_ports("p")),
    ("PUT /v1/projects/{p}/ports", "set_public_ports", lambda c: c.set_public_ports("p", [8080])),
    ("GET /v1/instances/{i}/files", "list_files", lambda c: c.list_files("i", "/")),
    ("PUT /v1/instances/{i}/files", "write_file", lambda c: c.write_file("i", "/a", b"x")),
    ("DELETE /v1/instances/{i}/files", "delete_file", lambda c: c.delete_file("i", "/a")),
    ("POST /v1/instances/{i}/files/mkdir", "make_dir", lambda c: c.make_dir("i", "/d")),
    ("POST /v1/instances/{i}/files/move", "move_file", lambda c: c.move_file("i", "/a", "/b")),
    ("POST /v1/instances/{i}/files/copy", "copy_file", lambda c: c.copy_file("i", "/a", "/b")),
    ("GET /v1/instances/{i}/files/archive", "download_files", lambda c: c.download_files("i", "/d")),
    ("POST /v1/instances/{i}/files/archive", "upload_files", lambda c: c.upload_files("i", "/d", b"\0" * 1024)),
    ("GET /v1/instances/{i}/files/watch", "watch_files", lambda c: next(c.watch_files("i", "/"), None)),
]


def template_re(path):
    """The regular expression of a spec path template ({path} may hold slashes)."""
    out = ""
    for part in re.split(r"(\{\w+\})", path):
        if part == "{path}":
            out += ".*"
        elif part.startswith("{"):
            out += "[^/]+"
        else:
            out += re.escape(part)
    return re.compile("^" + out + "$")


class CoverageTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(SPEC, encoding="utf-8") as f:
            cls.ops = spec_operations(f.read())

    def test_spec_parsed(self):
        self.assertGreater(len(self.ops), 80)
        self.assertIn("GET /v1/instances/{i}/files/watch", self.ops)

    def test_every_operation_has_a_method(self):
        table = {op for op, _, _ in ROUTES}
        missing = [op for op in self.ops if op not in table and op not in EXCLUDED]
        self.assertEqual(missing, [], "add these to ROUTES in tests/test_coverage.py with the method that calls them")

    def test_every_entry_is_in_the_spec_once_and_names_a_method(self):
        problems, seen = [], set()
        for op, method, _ in ROUTES:
            if op in seen:
                problems.append(f"{op} is listed twice")
            seen.add(op)
            if op not in self.ops:
                problems.append(f"{op} is not in docs/openapi.yaml")
            if not callable(getattr(envd.Client, method, None)):
                problems.append(f"{op}: Client.{method} is not a method")
        for op in EXCLUDED:
            if op not in self.ops:
                problems.append(f"excluded {op} is not in docs/openapi.yaml")
            if op in seen:
                problems.append(f"excluded {op} is also in ROUTES")
        self.assertEqual(problems, [])

    def test_each_call_sends_its_operation(self):
        seen = []

        class H(_support.QuietHandler):
            def handle_any(self):
                self.read_body()
                seen.append(f"{self.command} {self.path.split('?')[0]}")
                if self.headers.get("Upgrade"):
                    self.send_json(404, {"error": {"code": "not_found", "message": "recorded"}})
                elif self.command == "HEAD":
                    self.send_response(200)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                else:
                    self.send_json(200, {})

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = handle_any

        srv = _support.Server(H)
        self.addCleanup(srv.close)
        for op, method, call in ROUTES:
            with self.subTest(op=op, method=method):
                seen.clear()
                c = envd.Client(srv.url, "t", retries=0)
                try:
                    call(c)
                except Exception:  # the recorder's answers do not fit every call
                    pass
                finally:
                    c.close()
                verb, path = op.split(" ")
                rx = template_re(path)
                hit = [s for s in seen if s.split(" ")[0] == verb and rx.match(s.split(" ")[1])]
                self.assertTrue(hit, f"Client.{method} sent {seen}, not {op}")


if __name__ == "__main__":
    unittest.main()
