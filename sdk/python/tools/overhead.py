"""Measures the SDK's overhead against raw HTTP (http.client with one
kept-alive connection and hand-written JSON): N buffered exec calls and M
saves (each followed to its end: the SDK's wait over the event stream, raw
polling of GET /v1/operations/{id} every 50 ms). The two run in alternating
blocks so that load on the machine hits both alike.

    ENVD_URL=... ENVD_TOKEN=... ENVD_IMAGE=fixture python3 tools/overhead.py [N_EXEC] [N_SAVE]
"""

import http.client
import json
import os
import secrets
import sys
import time
from urllib.parse import urlsplit

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))
import envd  # noqa: E402


def main():
    n_exec = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    n_save = int(sys.argv[2]) if len(sys.argv) > 2 else 100
    url, token, image = os.environ["ENVD_URL"], os.environ["ENVD_TOKEN"], os.environ["ENVD_IMAGE"]
    c = envd.Client(url, token)
    project = "overhead-" + secrets.token_hex(3)
    c.create_project(project, image)
    inst = c.up(project)
    iid = inst["id"]
    u = urlsplit(url)
    raw = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    hdrs = {"Authorization": "Bearer " + token, "Content-Type": "application/json", "Accept": "application/json"}

    def raw_call(method, path, body=None):
        raw.request(method, path, body=None if body is None else json.dumps(body), headers=hdrs)
        r = raw.getresponse()
        data = r.read()
        if r.status >= 300:
            raise RuntimeError(f"{method} {path}: {r.status} {data[:200]!r}")
        return json.loads(data)

    args = ["true"]

    def sdk_exec():
        assert c.exec(iid, args)["exit_code"] == 0

    def raw_exec():
        assert raw_call("POST", f"/v1/instances/{iid}/exec", {"args": args})["exit_code"] == 0

    def sdk_save():
        assert c.wait_result(c.save(iid))["version"] > 0

    def raw_save():
        op = raw_call("POST", f"/v1/instances/{iid}/save", {})
        while op["state"] not in ("succeeded", "failed", "canceled"):
            time.sleep(0.05)
            op = raw_call("GET", f"/v1/operations/{op['id']}")
        assert op["state"] == "succeeded", op

    def measure(name, sdk, rawf, n, block):
        t = {"sdk": 0.0, "raw": 0.0}
        sdk(), rawf()  # warm up
        done = 0
        while done < n:
            k = min(block, n - done)
            for label, f in (("sdk", sdk), ("raw", rawf)):
                t0 = time.perf_counter()
                for _ in range(k):
                    f()
                t[label] += time.perf_counter() - t0
            done += k
        print(f"{name}: n={n} sdk {t['sdk']:.2f} s ({t['sdk'] / n * 1000:.2f} ms/call), "
              f"raw {t['raw']:.2f} s ({t['raw'] / n * 1000:.2f} ms/call), ratio sdk/raw {t['sdk'] / t['raw']:.3f}")

    try:
        measure("exec", sdk_exec, raw_exec, n_exec, 50)
        measure("save", sdk_save, raw_save, n_save, 5)
    finally:
        for i in c.list_instances(project):
            c.delete_instance(i["id"])
        try:
            c.delete_project(project)
        except envd.EnvdError:
            pass


if __name__ == "__main__":
    main()
