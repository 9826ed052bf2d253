import type { ErrorCode, ErrorDetail } from "./types.js";

/**
 * An error the API answered (or an operation or exec stream reported), with
 * its stable code. Codes are an open set: an unknown code gives a plain
 * EnvdError with that code; known codes give the subclasses below, so both
 * `err.code === "not_found"` and `err instanceof NotFoundError` work.
 */
export class EnvdError extends Error {
  /** HTTP status (for an operation's error: the status of its code). */
  readonly status: number;
  readonly code: ErrorCode;
  /** Machine-readable values, when the server sent any. */
  readonly details: Record<string, unknown> | undefined;
  /** Seconds from a Retry-After header (429, 503), when present. */
  readonly retryAfter: number | undefined;
  /** The id of the request that failed, when the server sent one. */
  requestId: string | undefined;

  constructor(status: number, code: ErrorCode, message: string, details?: Record<string, unknown>, retryAfter?: number) {
    super(message);
    this.name = "EnvdError";
    this.status = status;
    this.code = code;
    this.details = details;
    this.retryAfter = retryAfter;
  }
}

export class InvalidArgumentError extends EnvdError {}
export class UnauthenticatedError extends EnvdError {}
export class PermissionDeniedError extends EnvdError {}
export class NotFoundError extends EnvdError {}
export class AlreadyExistsError extends EnvdError {}
/** A request with an instance generation older than the newest; details.generation is the newest. */
export class StaleGenerationError extends EnvdError {}
/** A compare-and-swap lost (for example a switch with a stale expected_current). */
export class ConflictError extends EnvdError {}
/** The object is in the wrong state; for instances details.state is the current state. */
export class FailedPreconditionError extends EnvdError {}
export class IdempotencyKeyReusedError extends EnvdError {}
export class CanceledError extends EnvdError {}
export class InternalError extends EnvdError {}
export class UnavailableError extends EnvdError {}
export class DeadlineExceededError extends EnvdError {}
/** details: {quota, limit, used, requested}. */
export class QuotaExceededError extends EnvdError {}
/** details: {kind, limit, retry_after_seconds}; retryAfter is set. */
export class ResourceExhaustedError extends EnvdError {}
/** A process could not start for a reason in the image or the request (the runtime's reason is in the message). */
export class StartFailedError extends EnvdError {}
/** Nothing listens on the instance's port the proxy or tunnel was asked to reach. */
export class PortUnreachableError extends EnvdError {}
/** A request body is over a size limit of the node (details: limit_bytes); nothing changed. */
export class TooLargeError extends EnvdError {}
export class VolumeElsewhereError extends EnvdError {}
/** A checkpoint with memory (or its resume) the instance cannot give: not gVisor, not Running, or an external connection (details: reason). */
export class MemoryCheckpointUnsupportedError extends EnvdError {}
/** The node (every node) has no room for the instance now: a node-level answer, not the tenant's quota; retry later. */
export class InsufficientCapacityError extends EnvdError {}
/** A join token is unknown, expired or used (details: reason). */
export class JoinTokenInvalidError extends EnvdError {}
/** An operation ended because envd stopped while it ran. */
export class InterruptedError extends EnvdError {}
/** The instance is being woken and the request did not wait; details: {state, retry_after_seconds}; retryAfter is set. */
export class WakingError extends EnvdError {}

type ErrorClass = new (
  status: number,
  code: ErrorCode,
  message: string,
  details?: Record<string, unknown>,
  retryAfter?: number,
) => EnvdError;

/** Each known code with its class and HTTP status (Go: api/errdefs). */
const codes: Record<string, [ErrorClass, number]> = {
  invalid_argument: [InvalidArgumentError, 400],
  unauthenticated: [UnauthenticatedError, 401],
  permission_denied: [PermissionDeniedError, 403],
  not_found: [NotFoundError, 404],
  already_exists: [AlreadyExistsError, 409],
  stale_generation: [StaleGenerationError, 409],
  conflict: [ConflictError, 409],
  failed_precondition: [FailedPreconditionError, 409],
  idempotency_key_reused: [IdempotencyKeyReusedError, 422],
  canceled: [CanceledError, 499],
  internal: [InternalError, 500],
  unavailable: [UnavailableError, 503],
  deadline_exceeded: [DeadlineExceededError, 504],
  quota_exceeded: [QuotaExceededError, 507],
  resource_exhausted: [ResourceExhaustedError, 429],
  start_failed: [StartFailedError, 422],
  port_unreachable: [PortUnreachableError, 502],
  too_large: [TooLargeError, 413],
  volume_elsewhere: [VolumeElsewhereError, 409],
  memory_checkpoint_unsupported: [MemoryCheckpointUnsupportedError, 409],
  join_token_invalid: [JoinTokenInvalidError, 401],
  insufficient_capacity: [InsufficientCapacityError, 503],
  interrupted: [InterruptedError, 500],
  waking: [WakingError, 503],
};

/** Codes for error answers without an envd body (a proxy's, for example). */
const statusCodes: Record<number, string> = {
  400: "invalid_argument",
  401: "unauthenticated",
  403: "permission_denied",
  404: "not_found",
  409: "conflict",
  429: "resource_exhausted",
  431: "invalid_argument",
  502: "unavailable",
  503: "unavailable",
  504: "deadline_exceeded",
  507: "quota_exceeded",
};

/** The HTTP status of a code; 500 for an unknown one. */
export function statusOfCode(code: string): number {
  return codes[code]?.[1] ?? 500;
}

/** Makes the error of a code: its subclass when known, else an EnvdError. */
export function makeError(
  status: number,
  code: string,
  message: string,
  details?: Record<string, unknown>,
  retryAfter?: number,
): EnvdError {
  const cls = codes[code]?.[0] ?? EnvdError;
  const err = new cls(status, code, message, details, retryAfter);
  err.name = cls.name;
  return err;
}

/** Makes the error of an error object (a body's `error`, an exec exit's, an operation's). */
export function errorFromDetail(status: number, d: ErrorDetail, retryAfter?: number): EnvdError {
  const err = makeError(status, d.code, d.message, d.details, retryAfter);
  err.requestId = d.request_id;
  return err;
}

/** Parses a Retry-After header given in seconds (envd never sends a date). */
export function parseRetryAfter(v: string | null): number | undefined {
  if (v === null || !/^\s*\d+\s*$/.test(v)) return undefined;
  return Number(v);
}

/**
 * Turns an error answer into an EnvdError: the envd body when there is one,
 * else a code from the status, like the Go client.
 */
export function errorFromResponse(status: number, statusText: string, body: string, retryAfter?: number): EnvdError {
  try {
    const parsed = JSON.parse(body) as { error?: ErrorDetail };
    if (parsed && typeof parsed === "object" && parsed.error && typeof parsed.error.code === "string" && parsed.error.code) {
      return errorFromDetail(status, parsed.error, retryAfter);
    }
  } catch {
    // not JSON: a proxy's or net/http's own answer
  }
  let msg = body.trim();
  if (msg === "" || msg.length > 200) msg = `${status} ${statusText}`.trim();
  return makeError(status, statusCodes[status] ?? "internal", msg, undefined, retryAfter);
}

/** True for codes a retry cannot fix. */
export function isPermanent(err: unknown): boolean {
  return (
    err instanceof EnvdError &&
    ["invalid_argument", "not_found", "unauthenticated", "permission_denied"].includes(err.code)
  );
}
