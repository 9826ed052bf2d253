"""Typed errors for envd's stable error codes (docs/api.md, "Errors").

Every error answer of the server is ``{"error": {"code", "message", "details"}}``.
The code is stable and picks the exception class; an unknown code (the set is
open) gives the base class ``EnvdError``, so ``except EnvdError`` catches all.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Mapping, Optional, Type

__all__ = [
    "EnvdError",
    "InvalidArgument",
    "Unauthenticated",
    "PermissionDenied",
    "NotFound",
    "AlreadyExists",
    "StaleGeneration",
    "Conflict",
    "FailedPrecondition",
    "IdempotencyKeyReused",
    "Canceled",
    "Internal",
    "Unavailable",
    "DeadlineExceeded",
    "QuotaExceeded",
    "ResourceExhausted",
    "StartFailed",
    "PortUnreachable",
    "TooLarge",
    "VolumeElsewhere",
    "MemoryCheckpointUnsupported",
    "JoinTokenInvalid",
    "InsufficientCapacity",
    "Interrupted",
    "StreamError",
    "error_from_body",
    "error_from_response",
    "error_for_code",
]


class EnvdError(Exception):
    """An error the API answered (or an operation failed with).

    status: the HTTP status (0 when the error came from an operation's
    ``error`` or an event stream, which have no status of their own);
    code: the stable code; message: for humans; details: a dict of
    machine-readable values (may be empty); request_id: the id of the
    request that failed (its X-Request-Id), when the server sent one.
    """

    code_name: Optional[str] = None
    request_id: Optional[str] = None

    def __init__(self, status: int, code: str, message: str, details: Optional[Mapping[str, Any]] = None):
        super().__init__(f"{message} ({code})")
        self.status = status
        self.code = code
        self.message = message
        self.details: Dict[str, Any] = dict(details or {})

    def __repr__(self) -> str:
        return f"{type(self).__name__}(status={self.status!r}, code={self.code!r}, message={self.message!r}, details={self.details!r})"


class InvalidArgument(EnvdError):
    """400: a bad body, path or query value."""
    code_name = "invalid_argument"


class Unauthenticated(EnvdError):
    """401: missing, unknown, expired or revoked token."""
    code_name = "unauthenticated"


class PermissionDenied(EnvdError):
    """403: the token may not do this (admin routes)."""
    code_name = "permission_denied"


class NotFound(EnvdError):
    """404: no such project, instance, version, operation, image or route."""
    code_name = "not_found"


class AlreadyExists(EnvdError):
    """409: the name is taken."""
    code_name = "already_exists"


class StaleGeneration(EnvdError):
    """409: an instance generation older than the newest (``details["generation"]`` is the newest)."""
    code_name = "stale_generation"


class Conflict(EnvdError):
    """409: a compare-and-swap lost (for example a switch with a stale expected_current)."""
    code_name = "conflict"


class FailedPrecondition(EnvdError):
    """409: the object is in the wrong state; for instances ``details["state"]`` is the current state."""
    code_name = "failed_precondition"

    @property
    def state(self) -> Optional[str]:
        return self.details.get("state")


class IdempotencyKeyReused(EnvdError):
    """422: the Idempotency-Key was used before with a different request."""
    code_name = "idempotency_key_reused"


class Canceled(EnvdError):
    """499: the request or operation was canceled."""
    code_name = "canceled"


class Internal(EnvdError):
    """500: a bug or an unexpected failure."""
    code_name = "internal"


class Unavailable(EnvdError):
    """503: a dependency is down; retry later."""
    code_name = "unavailable"


class DeadlineExceeded(EnvdError):
    """504: a time limit ran out (for example an exec's timeout)."""
    code_name = "deadline_exceeded"


class QuotaExceeded(EnvdError):
    """507: a tenant quota would be exceeded; ``details``: quota, limit, used, requested."""
    code_name = "quota_exceeded"


class _RetryLater(EnvdError):
    """An error that says when to retry.

    retry_after: seconds to wait, from the ``Retry-After`` header or
    ``details["retry_after_seconds"]``; None when neither was sent.
    """

    def __init__(self, status, code, message, details=None, retry_after: Optional[float] = None):
        super().__init__(status, code, message, details)
        if retry_after is None:
            ra = self.details.get("retry_after_seconds")
            if isinstance(ra, (int, float)) and not isinstance(ra, bool):
                retry_after = float(ra)
        self.retry_after = retry_after


class ResourceExhausted(_RetryLater):
    """429: the tenant holds its limit of concurrent work of one kind;
    ``retry_after`` says when to try again."""
    code_name = "resource_exhausted"


class StartFailed(EnvdError):
    """422: a process could not start for a reason in the image or the
    request (an instance whose init cannot run, an exec's missing working
    directory); the runtime's reason is in the message. A command that is
    not found is not this error but exit code 127."""
    code_name = "start_failed"


class Waking(_RetryLater):
    """503: the instance is being woken (started from stopped or hibernated)
    and the request did not wait; ``details``: state, retry_after_seconds;
    ``retry_after`` says when to try again."""
    code_name = "waking"


class PortUnreachable(EnvdError):
    """502: Nothing listens on the instance's port the proxy or tunnel was asked to reach."""
    code_name = "port_unreachable"


class TooLarge(EnvdError):
    """413: A request body is over a size limit of the node (details: limit_bytes); nothing changed."""
    code_name = "too_large"


class VolumeElsewhere(EnvdError):
    """409: The project's volume data is on another node and no archive carries it here (details: node); the instance was not started with an empty volume."""
    code_name = "volume_elsewhere"


class MemoryCheckpointUnsupported(EnvdError):
    """409: A checkpoint with memory (or its resume) the instance cannot give: not of the gvisor class, not Running, or an external TCP connection (details: reason); nothing was made."""
    code_name = "memory_checkpoint_unsupported"


class JoinTokenInvalid(EnvdError):
    """401: A join token (envd serve --join) is unknown, expired or used (details: reason)."""
    code_name = "join_token_invalid"


class InsufficientCapacity(EnvdError):
    """503: The node (every node) has no room for the instance now; a node-level answer, not the tenant's quota. Retry later."""
    code_name = "insufficient_capacity"


class Interrupted(EnvdError):
    """An operation that envd stopped while it ran and could not resume (operations only)."""
    code_name = "interrupted"


class StreamError(EnvdError):
    """A stream (events, exec) broke in a way that is not an API error: a
    malformed frame or an early end. Its code is ``"stream"``, never sent by
    the server."""

    def __init__(self, message: str):
        super().__init__(0, "stream", message)


_CLASSES: Dict[str, Type[EnvdError]] = {
    cls.code_name: cls
    for cls in (
        InvalidArgument, Unauthenticated, PermissionDenied, NotFound, AlreadyExists,
        StaleGeneration, Conflict, FailedPrecondition, IdempotencyKeyReused, Canceled,
        Internal, Unavailable, DeadlineExceeded, QuotaExceeded, ResourceExhausted, StartFailed,
        Interrupted, Waking, PortUnreachable, TooLarge, VolumeElsewhere, MemoryCheckpointUnsupported,
        JoinTokenInvalid, InsufficientCapacity,
    )
}

# Codes for error answers without an envd body (a proxy's page, net/http's
# own 431), as the Go client assigns them.
_STATUS_CODES = {
    400: "invalid_argument",
    401: "unauthenticated",
    403: "permission_denied",
    404: "not_found",
    409: "conflict",
    429: "resource_exhausted",
    431: "invalid_argument",
    499: "canceled",
    502: "unavailable",
    503: "unavailable",
    504: "deadline_exceeded",
    507: "quota_exceeded",
}

# The HTTP status of each code (api/errdefs), for errors that arrive without
# one (the exec stream's exit message).
CODE_STATUS = {
    "too_large": 413,
    "volume_elsewhere": 409,
    "memory_checkpoint_unsupported": 409,
    "join_token_invalid": 401,
    "insufficient_capacity": 503,
    "port_unreachable": 502,
    "invalid_argument": 400,
    "unauthenticated": 401,
    "permission_denied": 403,
    "not_found": 404,
    "already_exists": 409,
    "stale_generation": 409,
    "conflict": 409,
    "failed_precondition": 409,
    "idempotency_key_reused": 422,
    "start_failed": 422,
    "resource_exhausted": 429,
    "canceled": 499,
    "internal": 500,
    "unavailable": 503,
    "deadline_exceeded": 504,
    "quota_exceeded": 507,
    "waking": 503,
}


def error_for_code(status: int, code: str, message: str, details: Optional[Mapping[str, Any]] = None,
                   retry_after: Optional[float] = None) -> EnvdError:
    """The exception for a stable code; EnvdError itself for an unknown one."""
    cls = _CLASSES.get(code, EnvdError)
    if issubclass(cls, _RetryLater):
        return cls(status, code, message, details, retry_after=retry_after)
    return cls(status, code, message, details)


def error_from_body(status: int, body: bytes, reason: str = "", retry_after: Optional[float] = None) -> EnvdError:
    """The exception for an error answer: the envd error body when there is
    one, else a code derived from the status (``internal`` for others)."""
    try:
        doc = json.loads(body.decode("utf-8"))
        err = doc.get("error") if isinstance(doc, dict) else None
        if isinstance(err, dict) and isinstance(err.get("code"), str) and err["code"]:
            details = err.get("details") if isinstance(err.get("details"), dict) else None
            e = error_for_code(status, err["code"], str(err.get("message", "")), details, retry_after)
            if isinstance(err.get("request_id"), str):
                e.request_id = err["request_id"]
            return e
    except (ValueError, UnicodeDecodeError):
        pass
    code = _STATUS_CODES.get(status, "internal")
    msg = body.decode("utf-8", "replace").strip()
    if not msg or len(msg) > 200:
        msg = f"{status} {reason}".strip()
    return error_for_code(status, code, msg, None, retry_after)


def parse_retry_after(value: Optional[str]) -> Optional[float]:
    """Seconds of a Retry-After header (envd sends seconds; dates are not used)."""
    if not value:
        return None
    try:
        v = float(value.strip())
    except ValueError:
        return None
    return v if v >= 0 else None


def error_from_response(resp) -> EnvdError:
    """The exception for an http.client.HTTPResponse with an error status
    (reads at most 1 MiB of its body)."""
    body = resp.read(1 << 20)
    e = error_from_body(resp.status, body, resp.reason or "", parse_retry_after(resp.getheader("Retry-After")))
    if e.request_id is None and resp.getheader("X-Request-Id"):
        e.request_id = resp.getheader("X-Request-Id")
    return e
