"""envd's HTTP API as a Python client (standard library only).

Results are plain dicts (and lists of dicts) with exactly the JSON keys of
docs/api.md; see the README for why. Errors are the classes of envd.errors.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import socket
import ssl
import re
import threading
import time
import uuid
from typing import Any, BinaryIO, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union
from urllib.parse import parse_qs, quote, urlencode, urlsplit

from . import sse
from . import websocket as ws
from .errors import (
    CODE_STATUS,
    EnvdError,
    ResourceExhausted,
    StreamError,
    error_for_code,
    error_from_body,
    parse_retry_after,
)

__all__ = ["Client", "EventStream", "ExecSession", "ByteStream", "is_done", "DONE_STATES"]

JSON = Dict[str, Any]

# Final operation states; any other state (the set is open) is unfinished.
DONE_STATES = frozenset({"succeeded", "failed", "canceled"})

# Codes a retry cannot fix: waiting and streaming stop at once on them.
PERMANENT_CODES = frozenset({"invalid_argument", "not_found", "unauthenticated", "permission_denied"})

# The exec stream's protocol (api/execproto).
EXEC_SUBPROTOCOL = "v1.exec.envd.dev"
BEARER_PREFIX = "base64url.bearer.envd.dev."
CH_STDIN, CH_STDOUT, CH_STDERR, CH_RESIZE, CH_EXIT, CH_EOF = 0, 1, 2, 3, 4, 5
EXEC_CHUNK = 32 << 10
EXEC_MAX_MESSAGE = 1 << 20
# The TCP tunnel's and the SSH stream's subprotocols (api/ports.go, api/types/ssh.go).
TUNNEL_SUBPROTOCOL = "v1.tcp.envd.dev"
SSH_SUBPROTOCOL = "ssh.envd.dev"
TUNNEL_CHUNK = 256 << 10
TUNNEL_MAX_MESSAGE = 1 << 20

# Retry policies of one call.
_RETRY_NONE = 0  # only 429: the server started nothing
_RETRY_SAFE = 1  # also connection errors and 503: reads, PUTs, DELETEs and keyed creations


def is_done(op: Mapping[str, Any]) -> bool:
    """Whether an operation dict reached a final state."""
    return op.get("state") in DONE_STATES


def duration(v: Union[str, int, float, None]) -> Optional[str]:
    """A Go duration for the API: strings pass as they are ("30m", "none"),
    numbers are seconds."""
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, bool):
        raise TypeError("a duration is a string or a number of seconds")
    return f"{int(v)}s" if float(v).is_integer() else f"{float(v)}s"


def _seconds(v: Union[str, int, float, None]) -> Optional[float]:
    """Seconds of a simple Go duration ("90s", "10m", "1h30m"), None if unknown."""
    if v is None:
        return None
    if isinstance(v, (int, float)):
        return float(v)
    units = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}
    total, num, i = 0.0, "", 0
    s = v.strip()
    while i < len(s):
        c = s[i]
        if c.isdigit() or c == ".":
            num += c
            i += 1
            continue
        unit = s[i:i + 2] if s[i:i + 2] in units else s[i]
        if unit not in units or not num:
            return None
        total += float(num) * units[unit]
        num, i = "", i + len(unit)
    return total if not num else None


def _seg(s: Union[str, int]) -> str:
    return quote(str(s), safe="")


def new_idempotency_key() -> str:
    """A fresh random Idempotency-Key."""
    return str(uuid.uuid4())


class Client:
    """A client of one envd server; safe for use from several threads.

    url and token default to the ENVD_URL and ENVD_TOKEN environment
    variables. timeout bounds each socket wait of ordinary calls (seconds);
    wait_timeout that of calls that wait for the server's work (creating an
    instance synchronously, importing an image); a buffered exec waits for
    its own timeout plus a margin. retries is how often a call is repeated
    after a connection error, a 503 or a 429 (with Retry-After) when that
    is safe; max_retry_wait caps one wait. ssl_context is used for https.
    """

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None, *, timeout: float = 60.0,
                 wait_timeout: float = 900.0, retries: int = 3, max_retry_wait: float = 30.0,
                 poll_interval: float = 0.5, ssl_context: Optional[ssl.SSLContext] = None,
                 user_agent: str = "envd-python"):
        url = url if url is not None else os.environ.get("ENVD_URL", "")
        token = token if token is not None else os.environ.get("ENVD_TOKEN", "")
        if not url:
            raise ValueError("envd url: pass url= or set ENVD_URL")
        u = urlsplit(url.rstrip("/"))
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"envd url {url!r}: must be http:// or https://HOST[:PORT]")
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.wait_timeout = wait_timeout
        self.retries = max(0, retries)
        self.max_retry_wait = max_retry_wait
        self.poll_interval = poll_interval
        self.ssl_context = ssl_context
        self.user_agent = user_agent
        self._scheme = u.scheme
        self._host = u.hostname
        self._port = u.port or (443 if u.scheme == "https" else 80)
        self._prefix = u.path.rstrip("/")
        self._netloc = u.netloc.rpartition("@")[2]
        self._local = threading.local()
        self._conns_lock = threading.Lock()
        self._conns: set = set()  # every thread's kept-alive connection, for close()

    def close(self) -> None:
        """Close the kept-alive connections (of every thread)."""
        with self._conns_lock:
            conns, self._conns = self._conns, set()
        for c in conns:
            c.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------
    # HTTP

    def _new_conn(self, timeout: Optional[float]) -> http.client.HTTPConnection:
        if self._scheme == "https":
            return http.client.HTTPSConnection(self._host, self._port, timeout=timeout,
                                               context=self.ssl_context or ssl.create_default_context())
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def _headers(self, extra: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
        h = {"User-Agent": self.user_agent, "Accept": "application/json"}
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        if extra:
            h.update(extra)
        return h

    def _path(self, path: str, query: Optional[Mapping[str, Any]] = None) -> str:
        p = self._prefix + path
        if query:
            q = {k: v for k, v in query.items() if v is not None}
            if q:
                p += "?" + urlencode(q, doseq=True)
        return p

    def _exchange(self, method: str, path: str, body: Any, headers: Dict[str, str],
                  timeout: float) -> Tuple[int, str, http.client.HTTPMessage, bytes]:
        """One request on this thread's keep-alive connection. A reused
        connection the server closed while idle is retried once on a new
        one (the server never saw the request)."""
        for fresh in (False, True):
            conn = getattr(self._local, "conn", None)
            reused = conn is not None and not fresh
            if conn is None or fresh:
                if conn is not None:
                    self._drop(conn)
                conn = self._new_conn(timeout)
                self._local.conn = conn
            with self._conns_lock:
                self._conns.add(conn)
            conn.timeout = timeout
            if conn.sock is not None:
                conn.sock.settimeout(timeout)
            try:
                conn.request(method, path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self._drop(conn)
                if reused:
                    continue
                raise
            except BaseException:
                self._drop(conn)
                raise
            if resp.will_close:
                self._drop(conn)
            return resp.status, resp.reason, resp.headers, data
        raise AssertionError("unreachable")

    def _drop(self, conn: http.client.HTTPConnection) -> None:
        conn.close()
        self._local.conn = None
        with self._conns_lock:
            self._conns.discard(conn)

    def _backoff(self, attempt: int) -> float:
        return min(self.max_retry_wait, 0.25 * (2 ** attempt)) * (0.5 + random.random() / 2)

    def _call(self, method: str, path: str, *, body: Any = None, query: Optional[Mapping[str, Any]] = None,
              headers: Optional[Mapping[str, str]] = None, timeout: Optional[float] = None,
              retry: int = _RETRY_SAFE, raw: bool = False, headers_out: Optional[Dict[str, str]] = None) -> Any:
        """Send a request (a JSON body when body is not bytes) with retries
        and return the decoded JSON answer (None for an empty one; bytes
        with raw)."""
        h = self._headers(headers)
        payload: Optional[bytes] = None
        if body is not None:
            if isinstance(body, (bytes, bytearray)):
                payload = bytes(body)
            else:
                payload = json.dumps(body).encode("utf-8")
                h["Content-Type"] = "application/json"
        full = self._path(path, query)
        t = timeout if timeout is not None else self.timeout
        attempt = 0
        while True:
            try:
                status, reason, rh, data = self._exchange(method, full, payload, h, t)
            except (OSError, http.client.HTTPException):
                if retry == _RETRY_SAFE and attempt < self.retries:
                    time.sleep(self._backoff(attempt))
                    attempt += 1
                    continue
                raise
            if status < 300:
                if headers_out is not None:
                    headers_out.update({k: v for k, v in rh.items()})
                if raw:
                    return data
                if not data.strip():
                    return None
                return json.loads(data.decode("utf-8"))
            err = error_from_body(status, data, reason, parse_retry_after(rh.get("Retry-After")))
            retryable = status == 429 or (status == 503 and retry == _RETRY_SAFE)
            if retryable and attempt < self.retries:
                wait = getattr(err, "retry_after", None)
                if wait is None:
                    wait = parse_retry_after(rh.get("Retry-After"))
                if wait is None:
                    wait = self._backoff(attempt)
                if wait <= self.max_retry_wait:
                    time.sleep(wait)
                    attempt += 1
                    continue
            raise err

    @staticmethod
    def _key_header(key: Optional[str]) -> Dict[str, str]:
        return {"Idempotency-Key": key or new_idempotency_key()}

    # ------------------------------------------------------------------
    # Server

    def healthz(self) -> JSON:
        """GET /healthz (no token needed)."""
        return self._call("GET", "/healthz")

    def info(self) -> JSON:
        """GET /v1/info: {version, node, data_dir, registry, components}."""
        return self._call("GET", "/v1/info")

    def metrics(self) -> str:
        """GET /metrics (admin token): Prometheus text."""
        return self._call("GET", "/metrics", headers={"Accept": "text/plain"}, raw=True).decode("utf-8")

    def mcp(self, message: Mapping[str, Any]) -> JSON:
        """POST /mcp: one JSON-RPC 2.0 message of the Model Context Protocol
        (e.g. {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}) to the
        node's MCP endpoint, with this client's token; the JSON-RPC answer
        (None for a notification)."""
        return self._call("POST", "/mcp", body=dict(message), headers={"Accept": "application/json, text/event-stream"},
                          retry=_RETRY_NONE)

    # ------------------------------------------------------------------
    # Images

    def list_images(self) -> List[JSON]:
        """GET /v1/images: [{name, ref, digest, size_bytes}]."""
        return self._call("GET", "/v1/images")

    def import_image(self, name: str, tar: Union[bytes, str, os.PathLike, BinaryIO]) -> JSON:
        """POST /v1/images?name=NAME: upload a base image as a tar stream,
        plain or gzip (bytes, a file path, or a binary file object, which is
        streamed). Importing a name again points it at the new image. Not
        retried (a stream cannot be replayed)."""
        path = self._path("/v1/images", {"name": name})
        h = self._headers()
        if isinstance(tar, (bytes, bytearray)):
            body: Any = bytes(tar)
            magic = body[:2]
        elif isinstance(tar, (str, os.PathLike)):
            with open(tar, "rb") as f:
                return self.import_image(name, f)
        else:
            magic = tar.read(2)
            first = magic

            def chunks() -> Iterator[bytes]:
                if first:
                    yield first
                while True:
                    b = tar.read(1 << 20)
                    if not b:
                        return
                    yield b
            body = chunks()
            h["Transfer-Encoding"] = "chunked"
        h["Content-Type"] = "application/gzip" if magic == b"\x1f\x8b" else "application/x-tar"
        conn = self._new_conn(self.wait_timeout)
        try:
            conn.request("POST", path, body=body, headers=h, encode_chunked="Transfer-Encoding" in h)
            resp = conn.getresponse()
            data = resp.read()
            if resp.status >= 300:
                raise error_from_body(resp.status, data, resp.reason, parse_retry_after(resp.getheader("Retry-After")))
            return json.loads(data.decode("utf-8"))
        finally:
            conn.close()

    # ------------------------------------------------------------------
    # Projects

    def create_project(self, name: str, base: str, *, excludes: Optional[Sequence[str]] = None,
                       compression: Optional[str] = None, volumes: Optional[Sequence[str]] = None,
                       limits: Optional[Mapping[str, Any]] = None, egress: Optional[str] = None,
                       isolate_instances: Optional[bool] = None, idempotency_key: Optional[str] = None,
                       runtime_class: Optional[str] = None, docker: Optional[bool] = None) -> JSON:
        """POST /v1/projects. volumes are "NAME:PATH[:UID:GID][:SIZE]";
        compression "estargz" (default), "zstd" or "gzip"; egress "open",
        "none" or "allow:..."; runtime_class "runc" or "gvisor" (None = each
        node's default); docker True lets its instances run dockerd (needs
        runtime_class "gvisor", else FailedPrecondition). A key is generated
        when none is given and reused by the retries."""
        req: JSON = {"name": name, "base": base}
        for k, v in (("excludes", excludes), ("compression", compression), ("volumes", volumes),
                     ("limits", limits), ("egress", egress), ("isolate_instances", isolate_instances),
                     ("runtime_class", runtime_class), ("docker", docker)):
            if v is not None:
                req[k] = list(v) if k in ("excludes", "volumes") else (dict(v) if k == "limits" else v)
        return self._call("POST", "/v1/projects", body=req, headers=self._key_header(idempotency_key))

    def list_projects(self) -> List[JSON]:
        return self._call("GET", "/v1/projects")

    def get_project(self, project: str) -> JSON:
        return self._call("GET", f"/v1/projects/{_seg(project)}")

    def delete_project(self, project: str) -> None:
        """DELETE /v1/projects/{p}; failed_precondition while instances are not Terminated."""
        self._call("DELETE", f"/v1/projects/{_seg(project)}")

    def set_retention(self, project: str, keep_last: Optional[int] = None,
                      keep_newer_than: Union[str, int, float, None] = None) -> JSON:
        """PUT /v1/projects/{p}/retention; no arguments removes the policy."""
        req: JSON = {}
        if keep_last is not None:
            req["keep_last"] = keep_last
        if keep_newer_than is not None:
            req["keep_newer_than"] = duration(keep_newer_than)
        return self._call("PUT", f"/v1/projects/{_seg(project)}/retention", body=req)

    def set_limits(self, project: str, limits: Optional[Mapping[str, Any]] = None, **fields: Any) -> JSON:
        """PUT /v1/projects/{p}/limits: memory_bytes, pids, cpus, cpu_weight,
        io_weight, disk_bytes, allow_privilege_escalation (a dict, keyword
        arguments, or both); none clears the limits."""
        req = dict(limits or {})
        req.update(fields)
        return self._call("PUT", f"/v1/projects/{_seg(project)}/limits", body=req)

    def set_network(self, project: str, egress: str, isolate_instances: bool = False) -> JSON:
        """PUT /v1/projects/{p}/network."""
        return self._call("PUT", f"/v1/projects/{_seg(project)}/network",
                          body={"egress": egress, "isolate_instances": isolate_instances})

    def egress_log(self, project: str, limit: int = 0, before: int = 0) -> List[JSON]:
        """GET /v1/projects/{p}/egress/log: what the egress gateway refused
        to the project's instances, newest first."""
        return self._call("GET", f"/v1/projects/{_seg(project)}/egress/log",
                          query={"limit": limit or None, "before": before or None})

    def set_secret(self, name: str, value: str) -> JSON:
        """PUT /v1/secrets/{s} (admin token): store or rotate a brokered
        secret; no answer carries the value."""
        return self._call("PUT", f"/v1/secrets/{_seg(name)}", body={"value": value})

    def bind_secret(self, name: str, host: str, header: str = "", format: str = "", scheme: str = "") -> JSON:
        """PUT /v1/secrets/{s}/binding: requests of the tenant's
        instances to host get the header (default Authorization: Bearer
        {{value}}); host "" unbinds; scheme "http" (default) for plain HTTP
        requests, "https" for HTTPS ones (TLS terminated at the node's egress
        proxy, whose CA the instances trust)."""
        body = {"host": host}
        for k, v in (("header", header), ("format", format), ("scheme", scheme)):
            if v:
                body[k] = v
        return self._call("PUT", f"/v1/secrets/{_seg(name)}/binding", body=body)

    def list_secrets(self) -> List[JSON]:
        """GET /v1/secrets: names and bindings, never values."""
        return self._call("GET", "/v1/secrets")

    def delete_secret(self, name: str) -> JSON:
        """DELETE /v1/secrets/{s}: revoke."""
        return self._call("DELETE", f"/v1/secrets/{_seg(name)}")

    def set_runtime_class(self, project: str, runtime_class: str) -> JSON:
        """PUT /v1/projects/{p}/runtime-class: "runc", "gvisor" or "" (each
        node's default) for instances made from now on; a class the tenant
        may not use is refused (PermissionDenied)."""
        return self._call("PUT", f"/v1/projects/{_seg(project)}/runtime-class",
                          body={"runtime_class": runtime_class})

    def set_docker(self, project: str, docker: bool) -> JSON:
        """PUT /v1/projects/{p}/docker: instances made from now on may run
        dockerd and nested containers; on only with runtime class "gvisor"
        (else FailedPrecondition, details feature "docker")."""
        return self._call("PUT", f"/v1/projects/{_seg(project)}/docker",
                          body={"docker": docker})

    def set_idle(self, project: str, after: str = "", action: str = "") -> JSON:
        """PUT /v1/projects/{p}/idle: stop the project's instances after
        ``after`` without activity (``"0"`` = never) with ``action`` stop,
        hibernate or hibernate-memory (with the processes, where they can be
        kept); both empty = the node's default."""
        body = {}
        if after:
            body["after"] = after
        if action:
            body["action"] = action
        return self._call("PUT", f"/v1/projects/{_seg(project)}/idle", body=body)

    def set_pool(self, project: str, size: int) -> JSON:
        """PUT /v1/projects/{p}/pool: keep ``size`` started instances of the
        current version ready for ``create_instance`` to claim (0 = none)."""
        return self._call("PUT", f"/v1/projects/{_seg(project)}/pool", body={"size": size})

    # ------------------------------------------------------------------
    # Instances

    def create_instance(self, project: str, *, version: Optional[int] = None,
                        ttl: Union[str, int, float, None] = None, retain: bool = False, wait: bool = True,
                        idempotency_key: Optional[str] = None, checkpoint: Optional[int] = None) -> JSON:
        """POST /v1/projects/{p}/instances. wait=True answers the instance
        once it is Running; wait=False asks ``Prefer: respond-async`` and
        answers the restore operation (its target is the new instance's id).
        ttl: a Go duration, seconds, or "none". The idempotency key (one is
        generated) makes retries return the same instance or operation."""
        req: JSON = {}
        if version:
            req["version"] = version
        if ttl is not None:
            req["ttl"] = duration(ttl)
        if retain:
            req["retain"] = True
        if checkpoint:
            req["checkpoint"] = checkpoint  # its version, the volumes restored first
        h = self._key_header(idempotency_key)
        if not wait:
            h["Prefer"] = "respond-async"
        return self._call("POST", f"/v1/projects/{_seg(project)}/instances", body=req, headers=h,
                          timeout=self.timeout if not wait else max(self.timeout, self.wait_timeout))

    up = create_instance

    def list_instances(self, project: Optional[str] = None) -> List[JSON]:
        """GET /v1/projects/{p}/instances, or GET /v1/instances for all."""
        if project is None:
            return self._call("GET", "/v1/instances")
        return self._call("GET", f"/v1/projects/{_seg(project)}/instances")

    def get_instance(self, instance_id: str) -> JSON:
        return self._call("GET", f"/v1/instances/{_seg(instance_id)}")

    def delete_instance(self, instance_id: str) -> JSON:
        """DELETE /v1/instances/{i}: the instance, Terminated (again for a Terminated one)."""
        return self._call("DELETE", f"/v1/instances/{_seg(instance_id)}")

    def _verb(self, instance_id: str, verb: str, body: Any = None, timeout: Optional[float] = None) -> JSON:
        return self._call("POST", f"/v1/instances/{_seg(instance_id)}/{verb}", body=body,
                          retry=_RETRY_NONE, timeout=timeout)

    def instance_verb(self, instance_id: str, name: str, timeout: Optional[float] = None) -> JSON:
        """POST .../{name}: a plain verb, without a body, answered with the
        instance (the server's list, api/types/instance_verbs.json: stop,
        start, pause, resume, ...). A verb the server does not serve is a
        NotFound. timeout defaults to the longer of timeout and wait_timeout,
        as a verb may start the instance. The named verbs below are this
        with their name."""
        if timeout is None:
            timeout = max(self.timeout, self.wait_timeout)
        return self._verb(instance_id, _seg(name), timeout=timeout)

    def stop(self, instance_id: str) -> JSON:
        """POST .../stop (only instances created with retain)."""
        return self.instance_verb(instance_id, "stop", timeout=self.timeout)

    def start(self, instance_id: str) -> JSON:
        """POST .../start: Running, generation + 1."""
        return self.instance_verb(instance_id, "start")

    def pause(self, instance_id: str) -> JSON:
        return self.instance_verb(instance_id, "pause", timeout=self.timeout)

    def resume(self, instance_id: str) -> JSON:
        return self.instance_verb(instance_id, "resume", timeout=self.timeout)

    def renew(self, instance_id: str, ttl: Union[str, int, float]) -> JSON:
        """POST .../renew: expires_at = now + ttl (may shorten it); "none" removes it."""
        return self._verb(instance_id, "renew", {"ttl": duration(ttl)})

    def hibernate(self, instance_id: str, *, memory: bool = False) -> JSON:
        """POST .../hibernate: a stopped retained instance lives on as a version.

        memory=True hibernates a Running instance with its processes (runtime
        class gvisor): any access resumes them. Where they cannot be kept it
        raises MemoryCheckpointUnsupported (409) and nothing changes."""
        body = {"memory": True} if memory else None
        return self._verb(instance_id, "hibernate", body, timeout=max(self.timeout, self.wait_timeout))

    # ------------------------------------------------------------------
    # Exec

    def exec(self, instance_id: str, args: Sequence[str], *, env: Optional[Sequence[str]] = None,
             cwd: Optional[str] = None, stdin: Union[str, bytes, None] = None,
             timeout: Union[str, int, float, None] = None, generation: Optional[int] = None,
             wake: bool = False) -> JSON:
        """POST /v1/instances/{i}/exec: runs args to the end and answers
        {exit_code, stdout, stderr, truncated, oom_killed}. A non-zero exit
        code is not an error; a timeout is DeadlineExceeded. Not retried.
        wake starts a stopped or hibernated instance first (Waking, 503,
        past the server's wake wait)."""
        req: JSON = {"args": list(args)}
        if env:
            req["env"] = list(env)
        if cwd:
            req["cwd"] = cwd
        if stdin is not None:
            req["stdin"] = stdin.decode("utf-8") if isinstance(stdin, bytes) else stdin
        if timeout is not None:
            req["timeout"] = duration(timeout)
        if generation:
            req["generation"] = generation
        if wake:
            req["wake"] = True
        secs = _seconds(timeout)
        read_timeout = max(self.timeout, (secs if secs is not None else 600.0) + 30.0)
        return self._call("POST", f"/v1/instances/{_seg(instance_id)}/exec", body=req, retry=_RETRY_NONE,
                          timeout=read_timeout)

    def exec_url(self, instance_id: str, args: Sequence[str], *, tty: bool = False, cols: Optional[int] = None,
                 rows: Optional[int] = None, env: Optional[Sequence[str]] = None, cwd: Optional[str] = None,
                 wake: bool = False) -> str:
        """The ws:// or wss:// URL of an exec stream (no token in it)."""
        if not args:
            raise ValueError("exec: no command")
        q: List[Tuple[str, str]] = [("cmd", a) for a in args]
        q += [("env", e) for e in (env or [])]
        if cwd:
            q.append(("cwd", cwd))
        if wake:
            q.append(("wake", "1"))
        if tty:
            q.append(("tty", "1"))
            if (cols is None) != (rows is None):
                raise ValueError("exec: cols and rows go together")
            if cols is not None:
                q += [("cols", str(cols)), ("rows", str(rows))]
        scheme = "wss" if self._scheme == "https" else "ws"
        return f"{scheme}://{self._netloc}{self._prefix}/v1/instances/{_seg(instance_id)}/exec/ws?{urlencode(q)}"

    def exec_session(self, instance_id: str, args: Sequence[str], *, tty: bool = False, cols: Optional[int] = None,
                     rows: Optional[int] = None, env: Optional[Sequence[str]] = None, cwd: Optional[str] = None,
                     token_in_subprotocol: bool = False, wake: bool = False) -> "ExecSession":
        """Open an exec WebSocket: a streaming (or with tty, interactive)
        command. Errors before the upgrade raise the usual EnvdError;
        errors of the command itself come with its exit message (see
        ExecSession). token_in_subprotocol sends the token the browser way
        instead of the Authorization header."""
        url = self.exec_url(instance_id, args, tty=tty, cols=cols, rows=rows, env=env, cwd=cwd, wake=wake)
        protos = [EXEC_SUBPROTOCOL]
        headers = {"User-Agent": self.user_agent}
        if self.token:
            if token_in_subprotocol:
                protos.append(bearer_subprotocol(self.token))
            else:
                headers["Authorization"] = "Bearer " + self.token
        attempt = 0
        while True:
            try:
                conn = ws.connect(url, protos, headers, timeout=self.timeout, ssl_context=self.ssl_context,
                                  max_message=EXEC_MAX_MESSAGE)
                return ExecSession(conn, instance_id)
            except ws.HandshakeError as e:
                err = error_from_body(e.status, e.body, e.reason, parse_retry_after(e.headers.get("retry-after")))
                if isinstance(err, ResourceExhausted) and attempt < self.retries:
                    wait = err.retry_after if err.retry_after is not None else self._backoff(attempt)
                    if wait <= self.max_retry_wait:
                        time.sleep(wait)
                        attempt += 1
                        continue
                raise err from None

    def exec_stream(self, instance_id: str, args: Sequence[str], *, stdin: Union[bytes, str, BinaryIO, None] = None,
                    stdout: Any = None, stderr: Any = None, tty: bool = False, cols: Optional[int] = None,
                    rows: Optional[int] = None, env: Optional[Sequence[str]] = None, cwd: Optional[str] = None) -> int:
        """Run a command over the exec WebSocket and return its exit code.
        stdin: bytes, str or a binary file (read in a thread, then EOF is
        sent); stdout/stderr: binary files or callables taking bytes (None
        drops the output). No output limit, no timeout."""
        with self.exec_session(instance_id, args, tty=tty, cols=cols, rows=rows, env=env, cwd=cwd) as s:
            feeder = threading.Thread(target=s._feed, args=(stdin,), daemon=True)
            feeder.start()
            return s.wait(stdout=stdout, stderr=stderr)

    # ------------------------------------------------------------------
    # Save and versions

    def save(self, instance_id: str, *, message: Optional[str] = None, expected_current: Optional[int] = None,
             generation: Optional[int] = None, idempotency_key: Optional[str] = None) -> JSON:
        """POST /v1/instances/{i}/save: answers the save operation (follow
        it with wait()). A retry with the same key (one is generated)
        answers the same operation, never a second save."""
        req: JSON = {}
        if message:
            req["message"] = message
        if expected_current is not None:
            req["expected_current"] = expected_current
        if generation:
            req["generation"] = generation
        return self._call("POST", f"/v1/instances/{_seg(instance_id)}/save", body=req,
                          headers=self._key_header(idempotency_key))

    def list_versions(self, project: str) -> List[JSON]:
        return self._call("GET", f"/v1/projects/{_seg(project)}/versions")

    def list_versions_page(self, project: str, limit: Optional[int] = None,
                           page_token: Optional[str] = None) -> Tuple[List[JSON], str]:
        """One page of GET /v1/projects/{p}/versions (by number) and the next
        page's token ("" after the last)."""
        return self._page(f"/v1/projects/{_seg(project)}/versions", limit, page_token)

    def list_instances_page(self, project: Optional[str] = None, limit: Optional[int] = None,
                            page_token: Optional[str] = None) -> Tuple[List[JSON], str]:
        """One page of GET /v1/instances (or a project's) and the next page's
        token ("" after the last)."""
        path = "/v1/instances" if project is None else f"/v1/projects/{_seg(project)}/instances"
        return self._page(path, limit, page_token)

    def _page(self, path: str, limit: Optional[int], page_token: Optional[str]) -> Tuple[List[JSON], str]:
        if limit is None and not page_token:
            limit = 100  # a page, never the whole list
        rh: Dict[str, str] = {}
        items = self._call("GET", path, query={"limit": limit, "page_token": page_token or None}, headers_out=rh)
        return items or [], next_page_token(rh.get("Link"))

    def get_version(self, project: str, version: int) -> JSON:
        return self._call("GET", f"/v1/projects/{_seg(project)}/versions/{int(version)}")

    def fork(self, instance_id: str, message: Optional[str] = None, ttl: Optional[str] = None,
             retain: Optional[bool] = None, idempotency_key: Optional[str] = None,
             memory: bool = False, count: Optional[int] = None) -> JSON:
        """POST /v1/instances/{i}/fork: an operation of kind "fork" whose
        result is {project, version, instance, instances, checkpoint?}: the
        instance saved as a version that is not current, and count new
        instances (1 to 16, default 1) started from it. memory=True (gvisor
        class only) forks its processes too: each new instance continues
        them from one checkpoint with memory."""
        body: JSON = {k: v for k, v in (("message", message), ("ttl", ttl), ("retain", retain), ("count", count))
                      if v is not None}
        if memory:
            body["memory"] = True
        return self._call("POST", f"/v1/instances/{_seg(instance_id)}/fork", body=body,
                          headers=self._key_header(idempotency_key))

    def version_changes(self, project: str, version: int, against: Optional[int] = None,
                        limit: Optional[int] = None) -> JSON:
        """GET /v1/projects/{p}/versions/{n}/changes: what changed from
        version ``against`` (default: the version's parent) to ``version``:
        packages added, removed and upgraded, then files."""
        return self._call("GET", f"/v1/projects/{_seg(project)}/versions/{int(version)}/changes",
                          query={"against": against, "limit": limit})

    def instance_changes(self, instance_id: str, limit: Optional[int] = None) -> JSON:
        """GET /v1/instances/{i}/changes: what a save of the instance would
        capture now, and what it leaves out (``excluded``, with reasons)."""
        return self._call("GET", f"/v1/instances/{_seg(instance_id)}/changes", query={"limit": limit})

    def set_current(self, project: str, version: int, expected_current: int) -> JSON:
        """POST /v1/projects/{p}/current: a compare-and-swap, so
        expected_current (0 = no current) is required; a lost swap raises
        Conflict. Not retried after a connection error (a retry could lose
        to itself)."""
        return self._call("POST", f"/v1/projects/{_seg(project)}/current",
                          body={"version": int(version), "expected_current": int(expected_current)}, retry=_RETRY_NONE)

    def pin_version(self, project: str, version: int) -> JSON:
        return self._call("POST", f"/v1/projects/{_seg(project)}/versions/{int(version)}/pin")

    def unpin_version(self, project: str, version: int) -> JSON:
        return self._call("DELETE", f"/v1/projects/{_seg(project)}/versions/{int(version)}/pin")

    # ------------------------------------------------------------------
    # Builds, migrations, GC

    def build(self, project: str, manager: str, packages: Sequence[str], *,
              validate: Optional[Sequence[Sequence[str]]] = None, from_version: Optional[int] = None,
              switch: bool = False, idempotency_key: Optional[str] = None) -> JSON:
        """POST /v1/projects/{p}/builds (manager "apt" or "apk"): the build operation."""
        req: JSON = {"manager": manager, "packages": list(packages)}
        if validate:
            req["validate"] = [list(v) for v in validate]
        if from_version:
            req["from"] = from_version
        if switch:
            req["switch"] = True
        return self._call("POST", f"/v1/projects/{_seg(project)}/builds", body=req,
                          headers=self._key_header(idempotency_key))

    def migrate(self, project: str, base: str, *, validate: Optional[Sequence[Sequence[str]]] = None,
                switch: bool = False, idempotency_key: Optional[str] = None, mode: Optional[str] = None) -> JSON:
        """POST /v1/projects/{p}/migrations: the migrate operation. base is
        an imported image name or a repo@digest (an imported image, or a
        version's image of the tenant's projects). mode is "rebase" (the
        default) or "rebuild" (the version's declared spec built again; a
        Dockerfile build with its final stage FROM the new base)."""
        req: JSON = {"base": base}
        if validate:
            req["validate"] = [list(v) for v in validate]
        if switch:
            req["switch"] = True
        if mode:
            req["mode"] = mode
        return self._call("POST", f"/v1/projects/{_seg(project)}/migrations", body=req,
                          headers=self._key_header(idempotency_key))

    def gc(self, dry_run: bool = False, idempotency_key: Optional[str] = None) -> JSON:
        """POST /v1/admin/gc (admin token): the gc operation."""
        return self._call("POST", "/v1/admin/gc", body={"dry_run": True} if dry_run else {},
                          headers=self._key_header(idempotency_key))

    # ------------------------------------------------------------------
    # Volumes and archives

    def list_volumes(self, project: str) -> List[JSON]:
        return self._call("GET", f"/v1/projects/{_seg(project)}/volumes")

    def add_volume(self, project: str, spec: str, path_add: Optional[Sequence[str]] = None) -> JSON:
        """POST /v1/projects/{p}/volumes with "NAME:PATH[:UID:GID][:SIZE]": the project."""
        req: JSON = {"spec": spec}
        if path_add:
            req["path_add"] = list(path_add)
        return self._call("POST", f"/v1/projects/{_seg(project)}/volumes", body=req, retry=_RETRY_NONE)

    def remove_volume(self, project: str, volume: str) -> JSON:
        """DELETE /v1/projects/{p}/volumes/{v}: the project; the volume's data on the node is deleted."""
        return self._call("DELETE", f"/v1/projects/{_seg(project)}/volumes/{_seg(volume)}", retry=_RETRY_NONE)

    def archive_volume(self, project: str, volume: str, name: Optional[str] = None, replace: bool = False) -> JSON:
        """POST .../volumes/{v}/archive: the archive (the server picks its key)."""
        req: JSON = {}
        if name:
            req["name"] = name
        if replace:
            req["replace"] = True
        return self._call("POST", f"/v1/projects/{_seg(project)}/volumes/{_seg(volume)}/archive", body=req,
                          retry=_RETRY_NONE, timeout=max(self.timeout, self.wait_timeout))

    def restore_volume(self, project: str, volume: str, name: Optional[str] = None, key: Optional[str] = None,
                       checkpoint: Optional[int] = None) -> JSON:
        """POST .../volumes/{v}/restore from an archive's name, its key or a
        checkpoint's archive of the volume (one of them)."""
        req: JSON = {}
        if name:
            req["name"] = name
        if key:
            req["key"] = key
        if checkpoint:
            req["checkpoint"] = checkpoint
        return self._call("POST", f"/v1/projects/{_seg(project)}/volumes/{_seg(volume)}/restore", body=req,
                          retry=_RETRY_NONE, timeout=max(self.timeout, self.wait_timeout))

    def list_archives(self, project: str, volume: Optional[str] = None) -> List[JSON]:
        path = f"/v1/projects/{_seg(project)}"
        if volume is not None:
            path += f"/volumes/{_seg(volume)}"
        return self._call("GET", path + "/archives")

    def delete_archive(self, project: str, volume: str, name: str) -> JSON:
        return self._call("DELETE", f"/v1/projects/{_seg(project)}/volumes/{_seg(volume)}/archives/{_seg(name)}")

    # ------------------------------------------------------------------
    # Tenants, tokens, quotas

    def create_token(self, tenant: str, admin: bool = False, expires_in: Union[str, int, float, None] = None) -> JSON:
        """POST /v1/admin/tenants/{t}/tokens (admin): {tenant, token, admin,
        id, created_at, expires_at?}; the token is shown only here. Not
        retried (a retry would make a second token)."""
        req: JSON = {}
        if admin:
            req["admin"] = True
        if expires_in is not None:
            req["expires_in"] = duration(expires_in)
        return self._call("POST", f"/v1/admin/tenants/{_seg(tenant)}/tokens", body=req, retry=_RETRY_NONE)

    def list_tokens(self, tenant: Optional[str] = None) -> List[JSON]:
        """GET /v1/admin/tokens[?tenant=T] (admin): TokenInfo dicts, never tokens."""
        return self._call("GET", "/v1/admin/tokens", query={"tenant": tenant} if tenant else None)

    def revoke_token(self, token_id: int) -> JSON:
        """DELETE /v1/admin/tokens/{id} (admin)."""
        return self._call("DELETE", f"/v1/admin/tokens/{int(token_id)}")

    def list_own_tokens(self) -> List[JSON]:
        """GET /v1/tokens: the caller's tenant's tokens."""
        return self._call("GET", "/v1/tokens")

    def revoke_own_token(self, token_id: int) -> JSON:
        """DELETE /v1/tokens/{id}: a token of the caller's tenant (its own included)."""
        return self._call("DELETE", f"/v1/tokens/{int(token_id)}")

    def set_quota(self, tenant: str, quota: Optional[Mapping[str, Any]] = None, **fields: Any) -> JSON:
        """PUT /v1/admin/tenants/{t}/quota (admin): max_instances,
        max_versions, max_stored_bytes, max_ttl, max_memory_bytes, max_pids,
        max_cpus, max_disk_bytes, runtime_classes (a list: the runtime
        classes its projects may use); absent = no limit."""
        req = dict(quota or {})
        req.update(fields)
        if "max_ttl" in req:
            req["max_ttl"] = duration(req["max_ttl"])
        return self._call("PUT", f"/v1/admin/tenants/{_seg(tenant)}/quota", body=req)

    def usage(self, tenant: Optional[str] = None) -> JSON:
        """GET /v1/usage (own), or GET /v1/admin/tenants/{t}/usage (admin)."""
        if tenant is None:
            return self._call("GET", "/v1/usage")
        return self._call("GET", f"/v1/admin/tenants/{_seg(tenant)}/usage")

    # ------------------------------------------------------------------
    # Operations

    def get_operation(self, op_id: str) -> JSON:
        return self._call("GET", f"/v1/operations/{_seg(op_id)}")

    def cancel_operation(self, op_id: str) -> JSON:
        """DELETE /v1/operations/{id}: asks for cancellation; the operation as it is now."""
        return self._call("DELETE", f"/v1/operations/{_seg(op_id)}")

    def operation_events(self, op_id: str, after: int = 0) -> List[JSON]:
        """GET /v1/operations/{id}/events as JSON: the events with seq > after, at once."""
        return self._call("GET", f"/v1/operations/{_seg(op_id)}/events", query={"after": after, "wait": "false"})

    def events(self, op: Union[str, Mapping[str, Any]], after: int = 0, *,
               max_failures: int = 5, timeout: Optional[float] = None) -> "EventStream":
        """The operation's events as they come (server-sent events), each
        exactly once and in order, resuming after the last seen event when
        the connection drops. Iterate it; when the iteration ends the
        stream's ``operation`` is the final operation."""
        return EventStream(self, _op_id(op), after, max_failures=max_failures, timeout=timeout)

    def wait(self, op: Union[str, Mapping[str, Any]], *, timeout: Optional[float] = None,
             on_event: Optional[Callable[[JSON], None]] = None) -> JSON:
        """Follow an operation to its end and return it in its final state
        (succeeded, failed or canceled: check ``state`` and ``error``).
        Streams its events (on_event gets each once, in order) and falls
        back to polling when the stream keeps failing. timeout (seconds)
        raises TimeoutError; it never cancels the operation."""
        op_id = _op_id(op)
        deadline = None if timeout is None else time.monotonic() + timeout
        stream = EventStream(self, op_id, 0, timeout=timeout)
        try:
            for ev in stream:
                if on_event:
                    on_event(ev)
            return stream.operation
        except EnvdError as e:
            if e.code in PERMANENT_CODES:
                raise
        except TimeoutError:
            if stream._deadline_hit:
                raise
        except (OSError, http.client.HTTPException, ValueError):
            pass
        # The stream kept failing: poll from the last event it delivered.
        return self._poll(op_id, stream.last_seq, deadline, on_event)

    def _poll(self, op_id: str, last: int, deadline: Optional[float],
              on_event: Optional[Callable[[JSON], None]]) -> JSON:
        while True:
            # The operation first: when it is done, the events read next
            # are all it will ever have.
            op = self.get_operation(op_id)
            for ev in self.operation_events(op_id, last):
                if ev.get("seq", 0) > last:
                    last = ev["seq"]
                    if on_event:
                        on_event(ev)
            if is_done(op):
                return op
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"operation {op_id} not done in time")
            time.sleep(self.poll_interval)

    def wait_result(self, op: Union[str, Mapping[str, Any]], *, timeout: Optional[float] = None,
                    on_event: Optional[Callable[[JSON], None]] = None) -> Any:
        """wait(), then the operation's result when it succeeded; a failed
        or canceled operation raises the EnvdError of its code (status 0)."""
        done = self.wait(op, timeout=timeout, on_event=on_event)
        if done.get("state") == "succeeded":
            return done.get("result")
        raise operation_error(done)

    # ------------------------------------------------------------------
    # Server (readiness)

    def readyz(self) -> JSON:
        """GET /readyz (no token needed): {status, checks}. A node that is
        not ready answers 503 with the same body; it is returned, not raised."""
        status, reason, rh, data = self._exchange("GET", self._path("/readyz"), None, self._headers(), self.timeout)
        if status in (200, 503):
            try:
                body = json.loads(data.decode("utf-8"))
                if isinstance(body, dict) and isinstance(body.get("status"), str):
                    return body
            except ValueError:
                pass
        raise error_from_body(status, data, reason, parse_retry_after(rh.get("Retry-After")))

    def pull_image(self, name: str, ref: str) -> JSON:
        """POST /v1/images?name=NAME&ref=REF: copy an image from another OCI
        registry. (An OCI image layout tar is imported with import_image.)"""
        return self._call("POST", "/v1/images", query={"name": name, "ref": ref}, retry=_RETRY_NONE,
                          timeout=self.wait_timeout)

    def tenant_tokens(self, tenant: str) -> List[JSON]:
        """GET /v1/admin/tenants/{t}/tokens (admin): the tenant's TokenInfo dicts."""
        return self._call("GET", f"/v1/admin/tenants/{_seg(tenant)}/tokens")

    # ------------------------------------------------------------------
    # Files (docs/api.md "Files"). user/uid/gid choose whose rights a call
    # uses (default: the image's user).

    @staticmethod
    def _file_query(path: Optional[str], user: Optional[str], uid: Optional[int], gid: Optional[int],
                    **extra: Any) -> Dict[str, Any]:
        q: Dict[str, Any] = {}
        if path is not None:
            q["path"] = path
        for k, v in extra.items():
            if v is not None and v is not False:
                q[k] = "1" if v is True else v
        if user:
            q["user"] = user
        if uid is not None:
            q["uid"] = uid
        if gid is not None:
            q["gid"] = gid
        return q

    def _open(self, method: str, path: str, query: Optional[Mapping[str, Any]] = None,
              headers: Optional[Mapping[str, str]] = None, body: Any = None,
              timeout: Optional[float] = None) -> Tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """A request on a connection of its own whose answer is read by the
        caller (streams); a non-2xx answer is raised. Close the connection.
        A GET is retried as _call retries reads (a connection error, 503,
        429); a request with a body is not."""
        h = self._headers(headers)
        chunked = body is not None and not isinstance(body, (bytes, bytearray))
        if chunked:
            h["Transfer-Encoding"] = "chunked"
        retry = method == "GET" and body is None
        attempt = 0
        while True:
            conn = self._new_conn(timeout if timeout is not None else self.timeout)
            wait: Optional[float] = None
            err: Optional[EnvdError] = None
            try:
                conn.request(method, self._path(path, query), body=body, headers=h, encode_chunked=chunked)
                resp = conn.getresponse()
                if resp.status < 300:
                    return conn, resp
                data = resp.read(1 << 20)
                err = error_from_body(resp.status, data, resp.reason, parse_retry_after(resp.getheader("Retry-After")))
                if not (retry and resp.status in (429, 503) and attempt < self.retries):
                    raise err
                wait = getattr(err, "retry_after", None)
                conn.close()
            except (OSError, http.client.HTTPException):
                conn.close()
                if not retry or attempt >= self.retries:
                    raise
            except BaseException:
                conn.close()
                raise
            wait = self._backoff(attempt) if wait is None else wait
            if err is not None and wait > self.max_retry_wait:
                raise err
            time.sleep(wait)
            attempt += 1

    def list_files(self, instance_id: str, path: str, *, user: Optional[str] = None, uid: Optional[int] = None,
                   gid: Optional[int] = None) -> JSON:
        """GET /v1/instances/{i}/files?path=DIR: {path, entries: [FileInfo], read_only?},
        every page of it (the server answers at most 1000 entries a page).
        A file is an InvalidArgument here (read it with read_file)."""
        listing: Optional[JSON] = None
        token: Optional[str] = None
        while True:
            page = self.list_files_page(instance_id, path, page_token=token, user=user, uid=uid, gid=gid)
            if listing is None:
                listing = page
            else:
                listing["entries"].extend(page["entries"])
            token = page.get("next_page_token")
            if not token:
                listing.pop("next_page_token", None)
                return listing

    def list_files_page(self, instance_id: str, path: str, *, limit: Optional[int] = None,
                        page_token: Optional[str] = None, user: Optional[str] = None, uid: Optional[int] = None,
                        gid: Optional[int] = None) -> JSON:
        """One page of a directory's listing, by name: at most limit entries
        (1 to 1000, default 1000) after page_token (the next_page_token of the
        page before); next_page_token is absent on the last page."""
        conn, resp = self._open("GET", f"/v1/instances/{_seg(instance_id)}/files",
                                self._file_query(path, user, uid, gid, limit=limit, page_token=page_token))
        try:
            data = resp.read()
            if resp.getheader("X-Envd-File-Type") != "dir":
                raise error_for_code(400, "invalid_argument", f"{path} in instance {instance_id} is not a directory")
            return json.loads(data.decode("utf-8"))
        finally:
            conn.close()

    def read_file(self, instance_id: str, path: str, offset: Optional[int] = None, length: Optional[int] = None, *,
                  user: Optional[str] = None, uid: Optional[int] = None, gid: Optional[int] = None) -> JSON:
        """GET /v1/instances/{i}/files?path=FILE, from offset, at most length
        bytes (a Range request): {data (bytes), content_type (from the name or
        sniffed), size (of the whole file), offset, modified, read_only}.
        A directory is an InvalidArgument; a range past the end a 416."""
        h = {"Accept": "*/*"}
        off = offset or 0
        if length is not None and length <= 0:
            raise ValueError("read_file: length must be positive")
        if off > 0 or length is not None:
            h["Range"] = f"bytes={off}-" + (str(off + length - 1) if length is not None else "")
        conn, resp = self._open("GET", f"/v1/instances/{_seg(instance_id)}/files",
                                self._file_query(path, user, uid, gid), headers=h)
        try:
            data = resp.read()
            if resp.getheader("X-Envd-File-Type") == "dir":
                raise error_for_code(400, "invalid_argument", f"{path} in instance {instance_id} is a directory: use list_files")
            size, start = len(data), 0
            cr = resp.getheader("Content-Range") or ""
            if resp.status == 206 and cr.startswith("bytes "):
                rng, _, total = cr[6:].partition("/")
                start, size = int(rng.partition("-")[0]), int(total)
            return {"data": data, "content_type": resp.getheader("Content-Type", "application/octet-stream"),
                    "size": size, "offset": start, "modified": resp.getheader("Last-Modified"),
                    "read_only": resp.getheader("X-Envd-Read-Only") == "true"}
        finally:
            conn.close()

    def write_file(self, instance_id: str, path: str, data: Union[bytes, str, BinaryIO], *, mode: Optional[str] = None,
                   mkdir: bool = False, user: Optional[str] = None, uid: Optional[int] = None,
                   gid: Optional[int] = None) -> JSON:
        """PUT /v1/instances/{i}/files?path=FILE: write the file atomically
        (a temporary file renamed into place). mode is octal ("0755"; default:
        kept, 0644 for a new file); mkdir makes missing parents. bytes and str
        are retried like any PUT; a binary file is streamed and not retried."""
        q = self._file_query(path, user, uid, gid, mode=mode, mkdir=mkdir)
        p = f"/v1/instances/{_seg(instance_id)}/files"
        h = {"Content-Type": "application/octet-stream"}
        if isinstance(data, str):
            data = data.encode("utf-8")
        if isinstance(data, (bytes, bytearray)):
            return self._call("PUT", p, body=bytes(data), query=q, headers=h, timeout=self.wait_timeout)
        conn, resp = self._open("PUT", p, q, headers=h, body=_chunks(data), timeout=self.wait_timeout)
        try:
            return json.loads(resp.read().decode("utf-8"))
        finally:
            conn.close()

    def make_dir(self, instance_id: str, path: str, *, mode: Optional[str] = None, parents: bool = False,
                 user: Optional[str] = None, uid: Optional[int] = None, gid: Optional[int] = None) -> JSON:
        """POST .../files/mkdir (mode default 0755; parents as mkdir -p)."""
        req: JSON = {"path": path}
        if mode:
            req["mode"] = mode
        if parents:
            req["parents"] = True
        return self._call("POST", f"/v1/instances/{_seg(instance_id)}/files/mkdir", body=req,
                          query=self._file_query(None, user, uid, gid), retry=_RETRY_NONE)

    def _move_or_copy(self, verb: str, instance_id: str, src: str, dst: str, overwrite: bool,
                      user: Optional[str], uid: Optional[int], gid: Optional[int]) -> JSON:
        req: JSON = {"from": src, "to": dst}
        if overwrite:
            req["overwrite"] = True
        return self._call("POST", f"/v1/instances/{_seg(instance_id)}/files/{verb}", body=req,
                          query=self._file_query(None, user, uid, gid), retry=_RETRY_NONE, timeout=self.wait_timeout)

    def move_file(self, instance_id: str, src: str, dst: str, *, overwrite: bool = False, user: Optional[str] = None,
                  uid: Optional[int] = None, gid: Optional[int] = None) -> JSON:
        """POST .../files/move: rename src to dst (overwrite replaces dst)."""
        return self._move_or_copy("move", instance_id, src, dst, overwrite, user, uid, gid)

    def copy_file(self, instance_id: str, src: str, dst: str, *, overwrite: bool = False, user: Optional[str] = None,
                  uid: Optional[int] = None, gid: Optional[int] = None) -> JSON:
        """POST .../files/copy: copy a file, symlink or directory tree."""
        return self._move_or_copy("copy", instance_id, src, dst, overwrite, user, uid, gid)

    def delete_file(self, instance_id: str, path: str, *, recursive: bool = False, user: Optional[str] = None,
                    uid: Optional[int] = None, gid: Optional[int] = None) -> None:
        """DELETE .../files?path=P (recursive for a non-empty directory)."""
        self._call("DELETE", f"/v1/instances/{_seg(instance_id)}/files",
                   query=self._file_query(path, user, uid, gid, recursive=recursive))

    def _save_stream(self, resp: http.client.HTTPResponse, dest: Union[None, str, os.PathLike, BinaryIO]) -> Union[bytes, int]:
        if dest is None:
            return resp.read()
        if isinstance(dest, (str, os.PathLike)):
            with open(dest, "wb") as f:
                return self._save_stream(resp, f)
        n = 0
        while True:
            b = resp.read(1 << 20)
            if not b:
                # A cut stream (an error after the first byte) raises
                # IncompleteRead in read(); a clean end arrives here.
                return n
            dest.write(b)
            n += len(b)

    def download_files(self, instance_id: str, path: str, dest: Union[None, str, os.PathLike, BinaryIO] = None, *,
                       format: Optional[str] = None, user: Optional[str] = None, uid: Optional[int] = None,
                       gid: Optional[int] = None) -> Union[bytes, int]:
        """GET .../files/archive: a tar (format "tar", default) or "tar.zst"
        of a directory or file. Returns the bytes, or with dest (a path or a
        binary file) streams there and returns the byte count. An error after
        the first byte cuts the stream: http.client.IncompleteRead."""
        conn, resp = self._open("GET", f"/v1/instances/{_seg(instance_id)}/files/archive",
                                self._file_query(path, user, uid, gid, format=format),
                                headers={"Accept": "application/x-tar, application/zstd, application/json"},
                                timeout=self.wait_timeout)
        try:
            return self._save_stream(resp, dest)
        finally:
            conn.close()

    def upload_files(self, instance_id: str, path: str, tar: Union[bytes, str, os.PathLike, BinaryIO], *,
                     mkdir: bool = False, user: Optional[str] = None, uid: Optional[int] = None,
                     gid: Optional[int] = None) -> JSON:
        """POST .../files/archive: extract a tar (plain, gzip or zstd, told
        from its first bytes) into the directory path (mkdir makes it):
        {path, entries}. Not retried."""
        if isinstance(tar, (str, os.PathLike)):
            with open(tar, "rb") as f:
                return self.upload_files(instance_id, path, f, mkdir=mkdir, user=user, uid=uid, gid=gid)
        if isinstance(tar, (bytes, bytearray)):
            head, body = bytes(tar[:4]), bytes(tar)
        else:
            head = tar.read(4)
            body = _chunks(tar, head)
        if head[:2] == b"\x1f\x8b":
            ct = "application/gzip"
        elif head == b"\x28\xb5\x2f\xfd":
            ct = "application/zstd"
        else:
            ct = "application/x-tar"
        conn, resp = self._open("POST", f"/v1/instances/{_seg(instance_id)}/files/archive",
                                self._file_query(path, user, uid, gid, mkdir=mkdir),
                                headers={"Content-Type": ct}, body=body, timeout=self.wait_timeout)
        try:
            return json.loads(resp.read().decode("utf-8"))
        finally:
            conn.close()

    def watch_files(self, instance_id: str, path: str, *, recursive: bool = False, user: Optional[str] = None,
                    uid: Optional[int] = None, gid: Optional[int] = None,
                    timeout: Optional[float] = None) -> Iterator[JSON]:
        """GET .../files/watch: yield each change under path ({type, path,
        from?, dir?, time}) as it happens, until the server ends the stream
        (the instance stopped, the directory went away). timeout bounds each
        wait for a byte (keep-alives come every 15 s; default 60 s). Closing
        the generator closes the connection. Changes while disconnected are
        not replayed."""
        conn, resp = self._open("GET", f"/v1/instances/{_seg(instance_id)}/files/watch",
                                self._file_query(path, user, uid, gid, recursive=recursive),
                                headers={"Accept": "text/event-stream"},
                                timeout=timeout if timeout is not None else max(self.timeout, 60.0))
        try:
            ct = resp.getheader("Content-Type", "")
            if not ct.startswith("text/event-stream"):
                raise StreamError(f"watch {path} in {instance_id}: content type {ct!r} is not an event stream")
            for e in sse.parse(resp):
                if e.event == "end":
                    return
                if e.event == "error":
                    raise error_from_body(0, e.data.encode("utf-8"))
                yield json.loads(e.data)
        finally:
            conn.close()

    # ------------------------------------------------------------------
    # Ports (docs/api.md "Ports and preview URLs")

    def list_ports(self, instance_id: str) -> List[JSON]:
        """GET /v1/instances/{i}/ports: [{address, port, protocol, public, url?}]."""
        return (self._call("GET", f"/v1/instances/{_seg(instance_id)}/ports") or {}).get("ports", [])

    def preview_url(self, instance_id: str, port: int, ttl: Union[str, int, float, None] = None) -> JSON:
        """POST /v1/instances/{i}/ports/{port}/token: {token, expires_at, url?, host?}."""
        body: JSON = {}
        if ttl is not None:
            body["ttl"] = duration(ttl)
        return self._call("POST", f"/v1/instances/{_seg(instance_id)}/ports/{int(port)}/token", body=body,
                          retry=_RETRY_NONE)

    def public_ports(self, project: str) -> JSON:
        """GET /v1/projects/{p}/ports: {public: [port], forwarded?: [{port, label?, scheme?}]}."""
        return self._call("GET", f"/v1/projects/{_seg(project)}/ports")

    def set_public_ports(self, project: str, ports: Sequence[int],
                         forwarded: Optional[Sequence[Mapping[str, Any]]] = None) -> JSON:
        """PUT /v1/projects/{p}/ports: the ports reached through the preview host without a token;
        with forwarded ([{port, label?, scheme?}]) the project's forwarded ports too (None keeps them)."""
        body: JSON = {"public": [int(p) for p in ports]}
        if forwarded is not None:
            body["forwarded"] = [dict(f) for f in forwarded]
        return self._call("PUT", f"/v1/projects/{_seg(project)}/ports", body=body)

    def proxy(self, instance_id: str, port: int, path: str = "/", method: str = "GET", body: Optional[bytes] = None,
              headers: Optional[Mapping[str, str]] = None) -> JSON:
        """A request to the instance's port through the path-form proxy
        (/v1/instances/{i}/ports/{port}/{path}; path is sent as given and may
        carry a query). Returns {status, headers (lower-case names), body}
        whatever the status: the instance's answer, or envd's own refusal
        (502 port_unreachable when nothing listens). The token is sent to
        envd only; the instance never sees it."""
        if path and not path.startswith("/"):
            path = "/" + path
        h = {"User-Agent": self.user_agent}
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        h.update(headers or {})
        conn = self._new_conn(self.timeout)
        try:
            conn.request(method, f"{self._prefix}/v1/instances/{_seg(instance_id)}/ports/{int(port)}{path}",
                         body=body, headers=h)
            resp = conn.getresponse()
            data = resp.read()
            return {"status": resp.status, "headers": {k.lower(): v for k, v in resp.getheaders()}, "body": data}
        finally:
            conn.close()

    def _ws_url(self, path: str) -> str:
        scheme = "wss" if self._scheme == "https" else "ws"
        return f"{scheme}://{self._netloc}{self._prefix}{path}"

    def _byte_stream(self, path: str, subprotocol: str) -> "ByteStream":
        headers = {"User-Agent": self.user_agent}
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        try:
            conn = ws.connect(self._ws_url(path), [subprotocol], headers, timeout=self.timeout,
                              ssl_context=self.ssl_context, max_message=TUNNEL_MAX_MESSAGE)
        except ws.HandshakeError as e:
            raise error_from_body(e.status, e.body, e.reason, parse_retry_after(e.headers.get("retry-after"))) from None
        return ByteStream(conn)

    def tunnel(self, instance_id: str, port: int) -> "ByteStream":
        """GET /v1/instances/{i}/tcp/{port}: a TCP connection to the port, as
        a process in the instance reaches 127.0.0.1:port, over a WebSocket.
        Nothing listening raises PortUnreachable."""
        return self._byte_stream(f"/v1/instances/{_seg(instance_id)}/tcp/{int(port)}", TUNNEL_SUBPROTOCOL)

    def ssh(self, instance_id: str) -> "ByteStream":
        """GET /v1/instances/{i}/ssh: an SSH connection to the node's SSH
        endpoint, logged in with this client's token and bound to the
        instance, as a byte stream for an SSH library (it starts with the
        server's "SSH-2.0-" banner)."""
        return self._byte_stream(f"/v1/instances/{_seg(instance_id)}/ssh", SSH_SUBPROTOCOL)

    # ------------------------------------------------------------------
    # SSH keys

    def list_ssh_keys(self) -> List[JSON]:
        """GET /v1/ssh-keys: the tenant's keys."""
        return self._call("GET", "/v1/ssh-keys")

    def add_ssh_key(self, public_key: str, name: Optional[str] = None) -> JSON:
        """POST /v1/ssh-keys (authorized_keys form). Not retried."""
        body: JSON = {"public_key": public_key}
        if name:
            body["name"] = name
        return self._call("POST", "/v1/ssh-keys", body=body, retry=_RETRY_NONE)

    def delete_ssh_key(self, key_id: int) -> JSON:
        """DELETE /v1/ssh-keys/{id}: the removed key."""
        return self._call("DELETE", f"/v1/ssh-keys/{int(key_id)}")

    # ------------------------------------------------------------------
    # Webhooks

    def create_webhook(self, url: str, events: Optional[Sequence[str]] = None,
                       description: Optional[str] = None) -> JSON:
        """POST /v1/webhooks: the hook, with its signing secret (shown only
        in this answer). events: instance.state, operation.<kind>,
        quota.refused, rollout.step, family.* or * (default). Not retried."""
        body: JSON = {"url": url}
        if events:
            body["events"] = list(events)
        if description:
            body["description"] = description
        return self._call("POST", "/v1/webhooks", body=body, retry=_RETRY_NONE)

    def list_webhooks(self) -> List[JSON]:
        """GET /v1/webhooks: the tenant's hooks, without secrets."""
        return self._call("GET", "/v1/webhooks")

    def delete_webhook(self, hook_id: str) -> JSON:
        """DELETE /v1/webhooks/{id}: the removed hook."""
        return self._call("DELETE", f"/v1/webhooks/{_seg(hook_id)}")

    def test_webhook(self, hook_id: str) -> JSON:
        """POST /v1/webhooks/{id}/test: queue a webhook.test event for this
        hook; answers the pending delivery. Not retried."""
        return self._call("POST", f"/v1/webhooks/{_seg(hook_id)}/test", retry=_RETRY_NONE)

    def webhook_deliveries(self, hook_id: str) -> List[JSON]:
        """GET /v1/webhooks/{id}/deliveries: the newest deliveries, newest
        first (state, attempts, last_error, response_code, event)."""
        return self._call("GET", f"/v1/webhooks/{_seg(hook_id)}/deliveries")

    # ------------------------------------------------------------------
    # Rollouts (admin)

    def create_rollout(self, from_base: str, to_base: str, *, tenant: Optional[str] = None,
                       selector: Optional[str] = None, validate: Optional[Sequence[Sequence[str]]] = None,
                       wave_size: Optional[int] = None, max_failures: Optional[int] = None, dry_run: bool = False,
                       allow_conflicts: bool = False, idempotency_key: Optional[str] = None) -> JSON:
        """POST /v1/admin/rollouts: move the selected projects (tenant, name
        glob selector) from one base image to another in waves, validating
        each. With an Idempotency-Key, retried."""
        req: JSON = {"from": from_base, "to": to_base}
        for k, v in (("tenant", tenant), ("selector", selector), ("wave_size", wave_size),
                     ("max_failures", max_failures)):
            if v is not None:
                req[k] = v
        if validate is not None:
            req["validate"] = [list(c) for c in validate]
        if dry_run:
            req["dry_run"] = True
        if allow_conflicts:
            req["allow_conflicts"] = True
        return self._call("POST", "/v1/admin/rollouts", body=req, headers=self._key_header(idempotency_key))

    def list_rollouts(self) -> List[JSON]:
        """GET /v1/admin/rollouts."""
        return self._call("GET", "/v1/admin/rollouts")

    def get_rollout(self, rollout_id: str) -> JSON:
        """GET /v1/admin/rollouts/{id}, with each project's status."""
        return self._call("GET", f"/v1/admin/rollouts/{_seg(rollout_id)}")

    def _rollout_action(self, rollout_id: str, action: str) -> JSON:
        return self._call("POST", f"/v1/admin/rollouts/{_seg(rollout_id)}/{action}", retry=_RETRY_NONE)

    def pause_rollout(self, rollout_id: str) -> JSON:
        """POST .../pause: no new wave starts."""
        return self._rollout_action(rollout_id, "pause")

    def resume_rollout(self, rollout_id: str) -> JSON:
        return self._rollout_action(rollout_id, "resume")

    def cancel_rollout(self, rollout_id: str) -> JSON:
        """POST .../cancel: pending projects are skipped; switched ones stay."""
        return self._rollout_action(rollout_id, "cancel")

    def rollback_rollout(self, rollout_id: str) -> JSON:
        """POST .../rollback: switched projects go back where current did not
        move since. Answers the rollback's operation (kind rollback; its
        result the rollout): follow it with wait(). Asking again is safe
        (the rollback running, or the one that finished it, is answered),
        so it is retried."""
        return self._call("POST", f"/v1/admin/rollouts/{_seg(rollout_id)}/rollback")

    # ------------------------------------------------------------------
    # Version export, validation

    def export_version(self, project: str, version: int,
                       dest: Union[None, str, os.PathLike, BinaryIO] = None) -> Union[bytes, int]:
        """GET /v1/projects/{p}/versions/{n}/export: the version as a tar of an
        OCI image layout (oci-layout, index.json, blobs/). Returns the bytes,
        or with dest (a path or binary file) streams there and returns the
        byte count; import_image takes it back."""
        conn, resp = self._open("GET", f"/v1/projects/{_seg(project)}/versions/{int(version)}/export",
                                headers={"Accept": "application/x-tar, application/json"}, timeout=self.wait_timeout)
        try:
            return self._save_stream(resp, dest)
        finally:
            conn.close()

    def get_validation(self, project: str) -> JSON:
        """The project's validation commands, {validate}, from GET
        /v1/projects/{p} (there is no GET .../validation)."""
        return {"validate": self.get_project(project).get("validate") or []}

    def set_validation(self, project: str, validate: Sequence[Sequence[str]]) -> JSON:
        """PUT /v1/projects/{p}/validation: the commands (argv lists) every
        migration of the project runs in its trial instance; [] clears them."""
        return self._call("PUT", f"/v1/projects/{_seg(project)}/validation",
                          body={"validate": [list(c) for c in validate]})
    # Checkpoints: one freeze, the rootfs as a version and the volumes as
    # archives, kept and deleted together

    def checkpoint(self, instance_id: str, message: Optional[str] = None, set_current: bool = False,
                   idempotency_key: Optional[str] = None, memory: bool = False) -> JSON:
        """POST /v1/instances/{i}/checkpoint: an operation of kind
        "checkpoint" whose result is {checkpoint, current, freeze_ms,
        volume_freeze_ms, ...}. Start from it with
        create_instance(p, checkpoint=ID). memory=True also keeps the
        instance's processes (gvisor class only), which that start then
        continues."""
        body: JSON = {}
        if message is not None:
            body["message"] = message
        if set_current:
            body["set_current"] = True
        if memory:
            body["memory"] = True
        return self._call("POST", f"/v1/instances/{_seg(instance_id)}/checkpoint", body=body,
                          headers=self._key_header(idempotency_key))

    def list_checkpoints(self, project: str) -> List[JSON]:
        """GET /v1/projects/{p}/checkpoints, newest first."""
        return self._call("GET", f"/v1/projects/{_seg(project)}/checkpoints")

    def get_checkpoint(self, project: str, checkpoint_id: int) -> JSON:
        """GET /v1/projects/{p}/checkpoints/{id}."""
        return self._call("GET", f"/v1/projects/{_seg(project)}/checkpoints/{int(checkpoint_id)}")

    def delete_checkpoint(self, project: str, checkpoint_id: int) -> JSON:
        """DELETE /v1/projects/{p}/checkpoints/{id}: with its archives, and
        its version unless current, pinned or used by an instance."""
        return self._call("DELETE", f"/v1/projects/{_seg(project)}/checkpoints/{int(checkpoint_id)}")

    def export_checkpoint(self, project: str, checkpoint_id: int,
                          dest: Union[None, str, os.PathLike, BinaryIO] = None) -> Union[bytes, int]:
        """GET /v1/projects/{p}/checkpoints/{id}/export: the checkpoint as a
        tar of an OCI image layout, its version's image and (with memory) its
        memory image. Returns the bytes, or with dest (a path or binary file)
        streams there and returns the byte count; import_checkpoint takes it
        back, here or on another installation."""
        conn, resp = self._open("GET", f"/v1/projects/{_seg(project)}/checkpoints/{int(checkpoint_id)}/export",
                                headers={"Accept": "application/x-tar, application/json"}, timeout=self.wait_timeout)
        try:
            return self._save_stream(resp, dest)
        finally:
            conn.close()

    def import_checkpoint(self, project: str, tar: Union[bytes, str, os.PathLike]) -> JSON:
        """POST /v1/projects/{p}/checkpoints/import: a checkpoint of the
        project from a tar export_checkpoint wrote (bytes or a file path).
        A corrupted tar is InvalidArgument (details reason archive_corrupt).
        Not retried once sent: a retry could import twice."""
        if isinstance(tar, (str, os.PathLike)):
            with open(tar, "rb") as f:
                tar = f.read()
        return self._call("POST", f"/v1/projects/{_seg(project)}/checkpoints/import", body=bytes(tar),
                          headers={"Content-Type": "application/x-tar"}, retry=_RETRY_NONE, timeout=self.wait_timeout)
    # Build specs, build contexts, operation logs

    def version_spec(self, project: str, version: int) -> JSON:
        """GET /v1/projects/{p}/versions/{n}/spec: a build spec that makes
        the version again; its "spec" is a body build_spec() takes."""
        return self._call("GET", f"/v1/projects/{_seg(project)}/versions/{int(version)}/spec")

    def build_spec(self, project: str, spec: Mapping[str, Any], *, switch: bool = False,
                   idempotency_key: Optional[str] = None) -> JSON:
        """POST /v1/projects/{p}/builds with a whole spec (packages,
        sources, files, env, run, validate, context): the build operation."""
        req: JSON = dict(spec)
        if switch:
            req["switch"] = True
        return self._call("POST", f"/v1/projects/{_seg(project)}/builds", body=req,
                          headers=self._key_header(idempotency_key))

    def build_dockerfile(self, project: str, dockerfile: str, *, args: Optional[Mapping[str, str]] = None,
                         target: Optional[str] = None, context: Optional[str] = None,
                         validate: Optional[Sequence[Sequence[str]]] = None, switch: bool = False,
                         idempotency_key: Optional[str] = None) -> JSON:
        """POST /v1/projects/{p}/builds of a Dockerfile (its text), run by
        the node's BuildKit; context is an uploaded build context's digest
        (upload_build_context): the build operation."""
        d: JSON = {"content": dockerfile}
        if args:
            d["args"] = dict(args)
        if target:
            d["target"] = target
        req: JSON = {"dockerfile": d}
        if context:
            req["context"] = context
        if validate:
            req["validate"] = [list(v) for v in validate]
        return self.build_spec(project, req, switch=switch, idempotency_key=idempotency_key)

    def upload_build_context(self, project: str, tar: bytes) -> JSON:
        """POST /v1/projects/{p}/build-contexts: keep a tar as a build
        context; a spec names the answer's "context"."""
        return self._call("POST", f"/v1/projects/{_seg(project)}/build-contexts", body=bytes(tar),
                          headers={"Content-Type": "application/x-tar"})

    def operation_logs(self, op: Union[str, Mapping[str, Any]]) -> str:
        """GET /v1/operations/{id}/logs: the operation's log (a build's
        output) as text."""
        data = self._call("GET", f"/v1/operations/{_seg(_op_id(op))}/logs", raw=True)
        return data.decode("utf-8", errors="replace")

    # ------------------------------------------------------------------
    # Cluster nodes (admin)

    def list_nodes(self) -> List[JSON]:
        """GET /v1/nodes: the cluster's nodes with state, labels, capacity,
        live instances and lease."""
        return self._call("GET", "/v1/nodes").get("nodes") or []

    def get_node(self, name: str) -> JSON:
        """GET /v1/nodes/{name}."""
        return self._call("GET", f"/v1/nodes/{_seg(name)}")

    def cordon_node(self, name: str) -> JSON:
        """POST /v1/nodes/{name}/cordon: no new placements there."""
        return self._call("POST", f"/v1/nodes/{_seg(name)}/cordon")

    def uncordon_node(self, name: str) -> JSON:
        """POST /v1/nodes/{name}/uncordon: ready again."""
        return self._call("POST", f"/v1/nodes/{_seg(name)}/uncordon")

    def drain_node(self, name: str) -> JSON:
        """POST /v1/nodes/{name}/drain: the node hibernates its instances,
        then shows state drained."""
        return self._call("POST", f"/v1/nodes/{_seg(name)}/drain")

    def join_command(self) -> JSON:
        """GET /v1/cluster/join-command: the envd serve line that joins this
        cluster; it holds credentials."""
        return self._call("GET", "/v1/cluster/join-command")

    def set_checkpoint_every(self, project: str, every: str) -> JSON:
        """PUT /v1/projects/{p}/checkpoint: how often the project's running
        retained instances are checkpointed (a Go duration; "0" = never)."""
        return self._call("PUT", f"/v1/projects/{_seg(project)}/checkpoint", body={"every": every})

    def get_checkpoint_every(self, project: str) -> JSON:
        """GET /v1/projects/{p}/checkpoint."""
        return self._call("GET", f"/v1/projects/{_seg(project)}/checkpoint")

    def create_join_token(self, ttl: Optional[str] = None) -> JSON:
        """POST /v1/cluster/join-tokens: a join token (used once, expires
        after ttl, default 1h) and the short `envd serve --join URL --token
        T` line. Admin token."""
        return self._call("POST", "/v1/cluster/join-tokens", body={"ttl": ttl} if ttl else {}, retry=_RETRY_NONE)

    def join(self, node: str) -> JSON:
        """POST /v1/cluster/join: the cluster's settings (database, registry,
        S3, with credentials) for a joining node, once per join token; this
        client's token must be the join token."""
        return self._call("POST", "/v1/cluster/join", body={"node": node}, retry=_RETRY_NONE)


def operation_error(op: Mapping[str, Any]) -> EnvdError:
    """The exception for a failed or canceled operation dict."""
    err = op.get("error") or {}
    code = err.get("code") or ("canceled" if op.get("state") == "canceled" else "internal")
    msg = err.get("message") or f"operation {op.get('id')} {op.get('state')}"
    e = error_for_code(0, code, msg, err.get("details"))
    e.operation = dict(op)  # type: ignore[attr-defined]
    return e


def _op_id(op: Union[str, Mapping[str, Any]]) -> str:
    return op if isinstance(op, str) else str(op["id"])


def bearer_subprotocol(token: str) -> str:
    """The subprotocol carrying a token for clients that cannot set headers."""
    import base64
    return BEARER_PREFIX + base64.urlsafe_b64encode(token.encode("utf-8")).decode("ascii").rstrip("=")


class EventStream:
    """An operation's event stream (GET /v1/operations/{id}/events).

    Iterating yields each event dict {seq, at, type, message, data?} once,
    in order. When the connection drops (or the server ends it early) the
    stream reconnects with Last-Event-ID = the last seq seen, so nothing is
    missed or repeated; it gives up after max_failures reconnects in a row
    that brought no new event, or at once on a permanent error (not_found,
    unauthenticated, ...). After the iteration, ``operation`` is the final
    operation; ``reconnects`` counts the reconnections.
    """

    def __init__(self, client: Client, op_id: str, after: int = 0, *, max_failures: int = 5,
                 timeout: Optional[float] = None):
        self.client = client
        self.op_id = op_id
        self.last_seq = after
        self.max_failures = max_failures
        self.operation: Optional[JSON] = None
        self.reconnects = 0
        self._deadline = None if timeout is None else time.monotonic() + timeout
        self._deadline_hit = False
        self._conn: Optional[http.client.HTTPConnection] = None

    def _read_timeout(self) -> float:
        # The server sends a keep-alive comment every 15 s.
        t = max(self.client.timeout, 60.0)
        if self._deadline is not None:
            left = self._deadline - time.monotonic()
            if left <= 0:
                self._deadline_hit = True
                raise TimeoutError(f"operation {self.op_id} not done in time")
            t = min(t, left)
        return t

    def __iter__(self) -> Iterator[JSON]:
        failures = 0
        while True:
            before = self.last_seq
            wait: Optional[float] = None
            try:
                yield from self._once()
                if self.operation is not None:
                    return
                err: BaseException = StreamError(f"operation {self.op_id} events: the stream ended before the operation was done")
            except EnvdError as e:
                if e.code in PERMANENT_CODES:
                    raise
                if isinstance(e, ResourceExhausted):
                    wait = e.retry_after
                err = e
            except (OSError, http.client.HTTPException, ValueError) as e:
                err = e
            if self._deadline is not None and time.monotonic() >= self._deadline:
                self._deadline_hit = True
                raise TimeoutError(f"operation {self.op_id} not done in time") from err
            failures = 0 if self.last_seq > before else failures + 1
            if failures >= self.max_failures:
                raise err
            self.reconnects += 1
            time.sleep(wait if wait is not None and wait <= self.client.max_retry_wait
                       else self.client._backoff(failures))

    def drop(self) -> None:
        """Drop the current connection as a network failure would; the
        iteration goes on over a new one, after the last event seen. Safe
        to call from another thread."""
        c = self._conn
        sock = c.sock if c is not None else None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _once(self) -> Iterator[JSON]:
        c = self.client
        conn = c._new_conn(self._read_timeout())
        self._conn = conn
        try:
            h = c._headers({"Accept": "text/event-stream"})
            if self.last_seq > 0:
                h["Last-Event-ID"] = str(self.last_seq)
            conn.request("GET", c._path(f"/v1/operations/{_seg(self.op_id)}/events"), headers=h)
            resp = conn.getresponse()
            if resp.status != 200:
                data = resp.read(1 << 20)
                raise error_from_body(resp.status, data, resp.reason, parse_retry_after(resp.getheader("Retry-After")))
            ct = resp.getheader("Content-Type", "")
            if not ct.startswith("text/event-stream"):
                raise StreamError(f"operation {self.op_id} events: content type {ct!r} is not an event stream")
            for e in sse.parse(resp):
                if e.event == "end":
                    self.operation = json.loads(e.data)
                    return
                if e.event == "error":
                    raise error_from_body(0, e.data.encode("utf-8"))
                ev = json.loads(e.data)
                seq = ev.get("seq") or (int(e.id) if e.id and e.id.isdigit() else 0)
                if seq <= self.last_seq:
                    continue
                self.last_seq = seq
                yield ev
        finally:
            self._conn = None
            conn.close()


class ExecSession:
    """One command over the exec WebSocket (see docs/api.md, "Streaming and
    interactive").

    write()/close_stdin()/resize() send; recv() or iteration returns output
    as ("stdout" | "stderr", bytes) until the command exits, then
    ``exit_code`` is set. A command that could not run (instance not
    Running, unknown instance) raises the EnvdError of its exit message,
    with the HTTP status of the close code (4000 + status).
    """

    def __init__(self, conn: ws.WebSocket, instance_id: str):
        self.ws = conn
        self.instance_id = instance_id
        self.exit_code: Optional[int] = None
        self.error: Optional[EnvdError] = None

    def __enter__(self) -> "ExecSession":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _send(self, channel: int, payload: bytes = b"") -> None:
        self.ws.send(bytes([channel]) + payload)

    def write(self, data: Union[bytes, str]) -> None:
        """Send stdin (channel 0), in messages of at most 32 KiB."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        for i in range(0, len(data), EXEC_CHUNK):
            self._send(CH_STDIN, data[i:i + EXEC_CHUNK])

    def close_stdin(self) -> None:
        """Close the command's stdin (channel 5; with a tty the terminal hangs up)."""
        self._send(CH_EOF)

    def resize(self, cols: int, rows: int) -> None:
        """The terminal's new size (channel 3)."""
        self._send(CH_RESIZE, json.dumps({"cols": int(cols), "rows": int(rows)}).encode("ascii"))

    def interrupt(self) -> None:
        """Ctrl-C for the foreground process (with a tty)."""
        self.write(b"\x03")

    def recv(self) -> Optional[Tuple[str, bytes]]:
        """The next output ("stdout" or "stderr", bytes); None once the
        command exited (exit_code is then set)."""
        if self.exit_code is not None:
            return None
        while True:
            try:
                op, msg = self.ws.recv()
            except (OSError, ws.WebSocketError) as e:
                raise StreamError(f"exec in {self.instance_id!r}: the stream ended before the exit status: {e}") from e
            if op == ws.OP_CLOSE:
                code = self.ws.close_code or 0
                self.ws.abort()
                if 4000 <= code < 5000:
                    raise error_for_code(code - 4000, _code_for_status(code - 4000), self.ws.close_reason or f"closed with {code}")
                raise StreamError(f"exec in {self.instance_id!r}: closed ({code}) before the exit status")
            if not msg:
                continue
            ch, payload = msg[0], msg[1:]
            if ch == CH_STDOUT:
                return "stdout", payload
            if ch == CH_STDERR:
                return "stderr", payload
            if ch == CH_EXIT:
                try:
                    ex = json.loads(payload.decode("utf-8"))
                except ValueError as e:
                    raise StreamError(f"exec in {self.instance_id!r}: malformed exit message") from e
                self.ws.close(1000)
                err = ex.get("error")
                if err:
                    code = err.get("code") or "internal"
                    self.error = error_for_code(CODE_STATUS.get(code, 500), code, err.get("message", ""), err.get("details"))
                    self.exit_code = int(ex.get("exit_code", -1))
                    raise self.error
                self.exit_code = int(ex.get("exit_code", -1))
                return None
            # unknown channels are ignored

    def __iter__(self) -> Iterator[Tuple[str, bytes]]:
        while True:
            m = self.recv()
            if m is None:
                return
            yield m

    def wait(self, stdout: Any = None, stderr: Any = None) -> int:
        """Read to the end, passing output to stdout/stderr (binary files
        or callables; None drops it), and return the exit code."""
        sinks = {"stdout": _sink(stdout), "stderr": _sink(stderr)}
        for stream, data in self:
            sinks[stream](data)
        assert self.exit_code is not None
        return self.exit_code

    def output(self) -> Tuple[int, bytes, bytes]:
        """Read to the end: (exit_code, stdout, stderr)."""
        out, err = bytearray(), bytearray()
        code = self.wait(out.extend, err.extend)
        return code, bytes(out), bytes(err)

    def _feed(self, stdin: Union[bytes, str, BinaryIO, None]) -> None:
        try:
            if isinstance(stdin, (bytes, bytearray, str)):
                self.write(bytes(stdin) if not isinstance(stdin, str) else stdin)
            elif stdin is not None:
                while True:
                    b = stdin.read(EXEC_CHUNK)
                    if not b:
                        break
                    self.write(b)
            self.close_stdin()
        except (OSError, ws.WebSocketError):
            pass  # the command ended first; recv reports how

    def close(self) -> None:
        """Close the connection (kills the command if it still runs)."""
        self.ws.close(1000)


def _sink(target: Any) -> Callable[[bytes], None]:
    if target is None:
        return lambda b: None
    if callable(target):
        return target
    write = target.write

    def w(b: bytes) -> None:
        write(b)
        if hasattr(target, "flush"):
            target.flush()
    return w


def _code_for_status(status: int) -> str:
    for code, st in CODE_STATUS.items():
        if st == status and code not in ("already_exists", "stale_generation", "conflict"):
            return code
    return "internal"


def _chunks(f: BinaryIO, first: bytes = b"") -> Iterator[bytes]:
    """A binary file as chunks for a chunked request body."""
    if first:
        yield first
    while True:
        b = f.read(1 << 20)
        if not b:
            return
        yield b


class ByteStream:
    """A byte stream over a WebSocket: the TCP tunnel (Client.tunnel) and the
    SSH endpoint (Client.ssh). Binary messages carry the bytes both ways; an
    empty message ends the sender's direction (close_write, half-close).
    recv() returns b"" once the other side ended its direction or closed."""

    def __init__(self, conn: ws.WebSocket):
        self.ws = conn
        self._eof = False

    def __enter__(self) -> "ByteStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def send(self, data: Union[bytes, str]) -> None:
        """Send bytes (str as UTF-8), in messages of at most 256 KiB."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        for i in range(0, len(data), TUNNEL_CHUNK):
            self.ws.send(data[i:i + TUNNEL_CHUNK])

    def close_write(self) -> None:
        """End the direction towards the instance."""
        self.ws.send(b"")

    def recv(self) -> bytes:
        """The next bytes; b"" at the end."""
        while not self._eof:
            try:
                op, msg = self.ws.recv()
            except (OSError, ws.WebSocketError) as e:
                raise StreamError(f"tunnel: {e}") from e
            if op == ws.OP_CLOSE:
                self._eof = True
                code = self.ws.close_code or 0
                if 4000 <= code < 5000:
                    raise error_for_code(code - 4000, _code_for_status(code - 4000), self.ws.close_reason or f"closed with {code}")
                return b""
            if not msg:
                self._eof = True
                return b""
            return msg
        return b""

    def read_all(self) -> bytes:
        """Everything until the end."""
        out = bytearray()
        while True:
            b = self.recv()
            if not b:
                return bytes(out)
            out += b

    def close(self) -> None:
        self.ws.close(1000)


def next_page_token(link: Optional[str]) -> str:
    """The page_token of a Link header's rel="next" URL (RFC 8288); "" when none."""
    m = re.search(r'<([^>]+)>\s*;\s*rel="next"', link or "")
    if not m:
        return ""
    return (parse_qs(urlsplit(m.group(1)).query).get("page_token") or [""])[0]
