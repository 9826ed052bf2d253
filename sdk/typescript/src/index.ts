// @envd/sdk: a client of envd's HTTP API (docs/api.md) for Node 20+ and
// browsers, with no runtime dependency beyond fetch and WebSocket.
export {
  Client,
  Images,
  Projects,
  Instances,
  Versions,
  Operations,
  Builds,
  Migrations,
  Volumes,
  Tokens,
  Tenants,
  Nodes,
  isDone,
  operationError,
  type EventStreamOptions,
  type WaitOptions,
  type TarSource,
  type PageRequest,
  type Page,
  nextPageToken,
} from "./client.js";
export * from "./errors.js";
export {
  Transport,
  newIdempotencyKey,
  type ClientOptions,
  type CallOptions,
  type CreateOptions,
  type RetryPolicy,
  type WebSocketConstructor,
} from "./http.js";
export { ExecSession, Channel, EXEC_SUBPROTOCOL, BEARER_PREFIX, bearerSubprotocol, type ExecStreamOptions } from "./exec.js";
export { attachTerminal, type TerminalLike, type AttachOptions } from "./terminal.js";
export { parseSSE, type SSEMessage } from "./sse.js";
export { Files, FILE_TYPE_HEADER, type FileContent, type FileCallOptions, type FileUserOptions, type BytesSource } from "./files.js";
export { Ports, SshKeys, Rollouts, Webhooks, ByteStream, TUNNEL_SUBPROTOCOL, SSH_SUBPROTOCOL } from "./ports.js";
export type * from "./types.js";
