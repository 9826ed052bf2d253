"""envd: a Python client for envd's HTTP API, on the standard library only.

    import envd
    c = envd.Client()              # ENVD_URL and ENVD_TOKEN
    inst = c.up("web")
    print(c.exec(inst["id"], ["uname", "-a"])["stdout"])
"""

from .client import (
    DONE_STATES,
    ByteStream,
    Client,
    EventStream,
    ExecSession,
    bearer_subprotocol,
    duration,
    is_done,
    new_idempotency_key,
    operation_error,
)
from .errors import (
    AlreadyExists,
    Canceled,
    Conflict,
    DeadlineExceeded,
    EnvdError,
    FailedPrecondition,
    IdempotencyKeyReused,
    Internal,
    Interrupted,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    QuotaExceeded,
    ResourceExhausted,
    StartFailed,
    StaleGeneration,
    StreamError,
    Unauthenticated,
    Unavailable,
    Waking,
    PortUnreachable,
    TooLarge,
    error_for_code,
    error_from_body,
)

__version__ = "0.1.0"

__all__ = [
    "Client", "EventStream", "ExecSession", "DONE_STATES", "is_done", "duration", "new_idempotency_key",
    "operation_error", "bearer_subprotocol", "ByteStream",
    "EnvdError", "InvalidArgument", "Unauthenticated", "PermissionDenied", "NotFound", "AlreadyExists",
    "StaleGeneration", "Conflict", "FailedPrecondition", "IdempotencyKeyReused", "Canceled", "Internal",
    "Unavailable", "DeadlineExceeded", "QuotaExceeded", "ResourceExhausted", "StartFailed", "Interrupted", "StreamError",
    "Waking", "PortUnreachable", "TooLarge", "error_for_code", "error_from_body",
]
