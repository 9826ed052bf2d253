// The SDK calls the console needs that the SDK may not have yet (files,
// ports, nodes): the SDK's own method when it has one, else the same
// request through the SDK's Transport, so every call still goes through
// the SDK (its authentication, errors and retries).

import type { Client } from "../../sdk/typescript/src/index.js";

export interface FileInfo {
  name: string;
  path: string;
  type: string;
  size: number;
  mode: string;
  mtime: string;
  uid: number;
  gid: number;
  link_target?: string;
}

export interface FileList {
  path: string;
  entries: FileInfo[];
  read_only?: boolean;
}

export interface ListeningPort {
  address: string;
  port: number;
  protocol: string;
  public: boolean;
  url?: string;
}

export interface PreviewToken {
  url?: string;
  token: string;
  host?: string;
  expires_at: string;
}

export interface NodeInfo {
  name: string;
  api_url?: string;
  state: string;
  labels?: Record<string, string>;
  capacity?: Record<string, unknown>;
  instances?: number;
  lease_expires_at?: string;
}

// deno-lint-ignore no-explicit-any
type Any = any;

const enc = encodeURIComponent;

export async function listFiles(c: Client, id: string, path: string): Promise<FileList> {
  const files = (c as Any).files;
  if (files?.list) return files.list(id, path);
  return c.transport.json<FileList>({ method: "GET", path: `/v1/instances/${enc(id)}/files`, query: { path }, retry: "safe" });
}

export async function readText(c: Client, id: string, path: string): Promise<string> {
  const files = (c as Any).files;
  if (files?.readText) return files.readText(id, path);
  return c.transport.send({ method: "GET", path: `/v1/instances/${enc(id)}/files`, query: { path }, retry: "safe" }, {}, (res) => res.text());
}

export async function writeFile(c: Client, id: string, path: string, text: string): Promise<FileInfo> {
  const files = (c as Any).files;
  if (files?.write) return files.write(id, path, text);
  return c.transport.json<FileInfo>({
    method: "PUT",
    path: `/v1/instances/${enc(id)}/files`,
    query: { path },
    body: new TextEncoder().encode(text) as unknown as BodyInit,
    contentType: "application/octet-stream",
    retry: "safe",
  });
}

export async function mkdir(c: Client, id: string, path: string): Promise<FileInfo> {
  const files = (c as Any).files;
  if (files?.mkdir) return files.mkdir(id, path, { parents: true });
  return c.transport.json<FileInfo>({ method: "POST", path: `/v1/instances/${enc(id)}/files/mkdir`, json: { path, parents: true }, retry: "safe" });
}

export async function removeFile(c: Client, id: string, path: string, recursive: boolean): Promise<void> {
  const files = (c as Any).files;
  if (files?.remove) return files.remove(id, path, { recursive });
  await c.transport.json({
    method: "DELETE",
    path: `/v1/instances/${enc(id)}/files`,
    query: { path, recursive: recursive ? "1" : undefined },
    retry: "safe",
  });
}

export async function listPorts(c: Client, id: string): Promise<ListeningPort[]> {
  const ports = (c as Any).ports;
  if (ports?.list) {
    const r = await ports.list(id);
    return Array.isArray(r) ? r : (r.ports ?? []);
  }
  const r = await c.transport.json<{ ports: ListeningPort[] }>({ method: "GET", path: `/v1/instances/${enc(id)}/ports`, retry: "safe" });
  return r.ports ?? [];
}

export async function previewUrl(c: Client, id: string, port: number): Promise<PreviewToken> {
  const ports = (c as Any).ports;
  if (ports?.previewUrl) {
    const r = await ports.previewUrl(id, port);
    return typeof r === "string" ? { url: r, token: "", expires_at: "" } : r;
  }
  return c.transport.json<PreviewToken>({ method: "POST", path: `/v1/instances/${enc(id)}/ports/${port}/token`, json: {}, retry: "refused" });
}

/** GET /v1/nodes (admin), or undefined when the node does not serve it (404). */
export async function listNodes(c: Client): Promise<NodeInfo[] | undefined> {
  const nodes = (c as Any).nodes;
  try {
    if (nodes?.list) {
      const r = await nodes.list();
      return Array.isArray(r) ? r : (r.nodes ?? []);
    }
    const r = await c.transport.json<{ nodes: NodeInfo[] }>({ method: "GET", path: "/v1/nodes", retry: "safe" });
    return r.nodes ?? [];
  } catch (e) {
    if ((e as { status?: number }).status === 404) return undefined;
    throw e;
  }
}
