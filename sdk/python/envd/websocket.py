"""A minimal RFC 6455 WebSocket client on the standard library.

Enough for envd's exec stream: the opening handshake (with subprotocols and
extra headers), masked client frames, binary and text messages reassembled
from fragments, ping answered with pong, and the close handshake. No
extensions (permessage-deflate is never offered).
"""

from __future__ import annotations

import base64
import hashlib
import os
import socket
import ssl
import struct
import threading
from typing import Dict, List, Optional, Sequence, Tuple
from urllib.parse import urlsplit

__all__ = ["WebSocket", "WebSocketError", "HandshakeError", "connect", "OP_TEXT", "OP_BINARY", "OP_CLOSE", "OP_PING", "OP_PONG"]

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

OP_CONT = 0x0
OP_TEXT = 0x1
OP_BINARY = 0x2
OP_CLOSE = 0x8
OP_PING = 0x9
OP_PONG = 0xA

# The largest message read; envd's server sends at most 32 KiB per message.
DEFAULT_MAX_MESSAGE = 16 << 20


class WebSocketError(Exception):
    """A protocol violation or a broken connection."""


class HandshakeError(WebSocketError):
    """The server did not upgrade: status, headers and body of its answer."""

    def __init__(self, status: int, reason: str, headers: Dict[str, str], body: bytes):
        super().__init__(f"websocket handshake: {status} {reason}")
        self.status = status
        self.reason = reason
        self.headers = headers
        self.body = body


def accept_key(key: str) -> str:
    """The Sec-WebSocket-Accept value for a Sec-WebSocket-Key."""
    return base64.b64encode(hashlib.sha1((key + GUID).encode("ascii")).digest()).decode("ascii")


def encode_frame(opcode: int, payload: bytes, fin: bool = True, mask: bool = True) -> bytes:
    """One frame; clients must mask (RFC 6455 5.3)."""
    b0 = (0x80 if fin else 0) | opcode
    n = len(payload)
    mbit = 0x80 if mask else 0
    if n < 126:
        head = struct.pack("!BB", b0, mbit | n)
    elif n < 1 << 16:
        head = struct.pack("!BBH", b0, mbit | 126, n)
    else:
        head = struct.pack("!BBQ", b0, mbit | 127, n)
    if not mask:
        return head + payload
    key = os.urandom(4)
    return head + key + apply_mask(payload, key)


def apply_mask(data: bytes, key: bytes) -> bytes:
    """XOR data with the 4-byte key (its own inverse)."""
    if not data:
        return b""
    n = len(data)
    k = (key * (n // 4 + 1))[:n]
    return (int.from_bytes(data, "little") ^ int.from_bytes(k, "little")).to_bytes(n, "little")


class WebSocket:
    """A client connection. recv() from one thread; send() from any."""

    def __init__(self, sock: socket.socket, subprotocol: Optional[str], max_message: int = DEFAULT_MAX_MESSAGE,
                 buffered: bytes = b""):
        self.sock = sock
        self.subprotocol = subprotocol
        self.max_message = max_message
        self._buf = bytearray(buffered)
        self._send_lock = threading.Lock()
        self._close_sent = False
        self.close_code: Optional[int] = None  # the server's close status, once received
        self.close_reason = ""

    # -- reading --

    def _read_exact(self, n: int) -> bytes:
        while len(self._buf) < n:
            chunk = self.sock.recv(max(65536, n - len(self._buf)))
            if not chunk:
                raise WebSocketError("connection closed without a close frame")
            self._buf += chunk
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    def _read_frame(self) -> Tuple[bool, int, bytes]:
        b0, b1 = self._read_exact(2)
        if b0 & 0x70:
            raise WebSocketError("reserved bits set (no extension was negotiated)")
        fin, opcode = bool(b0 & 0x80), b0 & 0x0F
        masked, n = bool(b1 & 0x80), b1 & 0x7F
        if n == 126:
            (n,) = struct.unpack("!H", self._read_exact(2))
        elif n == 127:
            (n,) = struct.unpack("!Q", self._read_exact(8))
        if opcode >= 0x8 and (n > 125 or not fin):
            raise WebSocketError("malformed control frame")
        if n > self.max_message:
            raise WebSocketError(f"frame of {n} bytes exceeds the limit of {self.max_message}")
        key = self._read_exact(4) if masked else b""
        payload = self._read_exact(n)
        if masked:
            payload = apply_mask(payload, key)
        return fin, opcode, payload

    def recv(self) -> Tuple[int, bytes]:
        """The next data message as (opcode, payload): OP_BINARY or OP_TEXT.
        Pings are answered on the way. At the server's close frame the close
        is answered and (OP_CLOSE, payload) returned; close_code is set."""
        msg_op: Optional[int] = None
        parts: List[bytes] = []
        size = 0
        while True:
            fin, op, payload = self._read_frame()
            if op == OP_PING:
                self._send_frame(OP_PONG, payload)
                continue
            if op == OP_PONG:
                continue
            if op == OP_CLOSE:
                if len(payload) >= 2:
                    (self.close_code,) = struct.unpack("!H", payload[:2])
                    self.close_reason = payload[2:].decode("utf-8", "replace")
                else:
                    self.close_code = 1005
                self._reply_close(payload[:2])
                return OP_CLOSE, payload
            if op == OP_CONT:
                if msg_op is None:
                    raise WebSocketError("continuation frame without a message")
            elif op in (OP_TEXT, OP_BINARY):
                if msg_op is not None:
                    raise WebSocketError("new message inside a fragmented one")
                msg_op = op
            else:
                raise WebSocketError(f"unknown opcode {op}")
            size += len(payload)
            if size > self.max_message:
                raise WebSocketError(f"message exceeds the limit of {self.max_message} bytes")
            parts.append(payload)
            if fin:
                return msg_op, b"".join(parts)

    # -- writing --

    def _send_frame(self, opcode: int, payload: bytes, fin: bool = True) -> None:
        frame = encode_frame(opcode, payload, fin=fin)
        with self._send_lock:
            if self._close_sent:
                raise WebSocketError("send after close")
            if opcode == OP_CLOSE:
                self._close_sent = True
            self.sock.sendall(frame)

    def send(self, payload: bytes, binary: bool = True) -> None:
        """Send one message."""
        self._send_frame(OP_BINARY if binary else OP_TEXT, bytes(payload))

    def ping(self, payload: bytes = b"") -> None:
        self._send_frame(OP_PING, payload)

    def _reply_close(self, status: bytes) -> None:
        try:
            with self._send_lock:
                if self._close_sent:
                    return
                self._close_sent = True
                self.sock.sendall(encode_frame(OP_CLOSE, status))
        except OSError:
            pass

    def close(self, code: int = 1000, reason: str = "") -> None:
        """Start (or finish) the close handshake and close the socket."""
        try:
            with self._send_lock:
                if not self._close_sent:
                    self._close_sent = True
                    self.sock.sendall(encode_frame(OP_CLOSE, struct.pack("!H", code) + reason.encode("utf-8")[:123]))
        except OSError:
            pass
        self.abort()

    def abort(self) -> None:
        """Close the socket without a handshake."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def _read_http_head(sock: socket.socket) -> Tuple[bytes, bytes]:
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(4096)
        if not chunk:
            raise WebSocketError("connection closed during the handshake")
        buf += chunk
        if len(buf) > 64 << 10:
            raise WebSocketError("handshake answer headers too large")
    head, _, rest = buf.partition(b"\r\n\r\n")
    return head, rest


def connect(url: str, subprotocols: Sequence[str] = (), headers: Optional[Dict[str, str]] = None,
            timeout: Optional[float] = 30.0, ssl_context: Optional[ssl.SSLContext] = None,
            max_message: int = DEFAULT_MAX_MESSAGE) -> WebSocket:
    """Open a WebSocket to a ws://, wss://, http:// or https:// URL.

    timeout bounds the connect and the handshake; the returned connection
    blocks without a timeout. A non-101 answer raises HandshakeError with
    the server's status and body."""
    u = urlsplit(url)
    secure = u.scheme in ("wss", "https")
    if u.scheme not in ("ws", "wss", "http", "https"):
        raise ValueError(f"websocket url {url!r}: scheme must be ws, wss, http or https")
    host = u.hostname or ""
    port = u.port or (443 if secure else 80)
    path = (u.path or "/") + ("?" + u.query if u.query else "")
    sock = socket.create_connection((host, port), timeout=timeout)
    try:
        if secure:
            ctx = ssl_context or ssl.create_default_context()
            sock = ctx.wrap_socket(sock, server_hostname=host)
        key = base64.b64encode(os.urandom(16)).decode("ascii")
        hostport = u.netloc.rpartition("@")[2]
        lines = [
            f"GET {path} HTTP/1.1",
            f"Host: {hostport}",
            "Upgrade: websocket",
            "Connection: Upgrade",
            f"Sec-WebSocket-Key: {key}",
            "Sec-WebSocket-Version: 13",
        ]
        if subprotocols:
            lines.append("Sec-WebSocket-Protocol: " + ", ".join(subprotocols))
        for k, v in (headers or {}).items():
            if "\r" in k or "\n" in k or "\r" in v or "\n" in v:
                raise ValueError(f"header {k!r}: control characters")
            lines.append(f"{k}: {v}")
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        head, rest = _read_http_head(sock)
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        parts = status_line.split(" ", 2)
        if len(parts) < 2 or not parts[1].isdigit():
            raise WebSocketError(f"malformed handshake answer {status_line!r}")
        status, reason = int(parts[1]), parts[2] if len(parts) > 2 else ""
        hdrs: Dict[str, str] = {}
        for line in header_lines:
            k, _, v = line.partition(":")
            hdrs[k.strip().lower()] = v.strip()
        if status != 101:
            body = rest
            n = int(hdrs.get("content-length", "0") or 0)
            while len(body) < min(n, 1 << 20):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                body += chunk
            raise HandshakeError(status, reason, hdrs, body[: n or len(body)])
        if hdrs.get("upgrade", "").lower() != "websocket" or "upgrade" not in hdrs.get("connection", "").lower():
            raise WebSocketError("handshake answer is not a websocket upgrade")
        if hdrs.get("sec-websocket-accept") != accept_key(key):
            raise WebSocketError("handshake answer has a wrong Sec-WebSocket-Accept")
        if hdrs.get("sec-websocket-extensions"):
            raise WebSocketError("the server chose an extension that was not offered")
        proto = hdrs.get("sec-websocket-protocol") or None
        if proto is not None and proto not in subprotocols:
            raise WebSocketError(f"the server chose subprotocol {proto!r}, which was not offered")
        sock.settimeout(None)
        return WebSocket(sock, proto, max_message=max_message, buffered=rest)
    except BaseException:
        sock.close()
        raise
