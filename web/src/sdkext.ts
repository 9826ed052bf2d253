// The SDK calls of the file browser and the ports page, and the nodes
// list: the SDK's client.nodes.list() when it has one, else the same
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

export function listFiles(c: Client, id: string, path: string): Promise<FileList> {
  return c.files.list(id, path);
}

export function readText(c: Client, id: string, path: string): Promise<string> {
  return c.files.readText(id, path);
}

export function writeFile(c: Client, id: string, path: string, text: string): Promise<FileInfo> {
  return c.files.write(id, path, text);
}

export function mkdir(c: Client, id: string, path: string): Promise<FileInfo> {
  return c.files.mkdir(id, path, { parents: true });
}

export function removeFile(c: Client, id: string, path: string, recursive: boolean): Promise<void> {
  return c.files.remove(id, path, { recursive });
}

export function listPorts(c: Client, id: string): Promise<ListeningPort[]> {
  return c.ports.list(id);
}

export function previewUrl(c: Client, id: string, port: number): Promise<PreviewToken> {
  return c.ports.previewUrl(id, port);
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
