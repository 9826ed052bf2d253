// The SDK calls of the file browser, the ports page and the nodes list,
// in the words the pages use; every call goes through the SDK (its
// authentication, errors and retries), and the wire types are the SDK's.

import type { Client, FileInfo, FileList, ListeningPort, Node, PreviewToken } from "../../sdk/typescript/src/index.js";

export type { FileInfo, FileList, ListeningPort, PreviewToken };
export type NodeInfo = Node;

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
  try {
    return await c.nodes.list();
  } catch (e) {
    if ((e as { status?: number }).status === 404) return undefined;
    throw e;
  }
}
