// The signed-in session: the token lives in sessionStorage (this tab only,
// gone when it closes), never in a URL. Every call goes through call(),
// which turns a 401 into a return to the sign-in page with the reason.

import { Client, EnvdError } from "../../sdk/typescript/src/index.js";

const KEY = "envd.console.token";

export interface Session {
  client: Client;
  tenant: string;
  /** The admin pages are offered (the token may list other tenants' tokens). */
  admin: boolean;
}

let current: Session | undefined;
let onSignedOut: (message: string) => void = () => {};

export function setSignedOutHandler(f: (message: string) => void): void {
  onSignedOut = f;
}

export function session(): Session | undefined {
  return current;
}

export function storedToken(): string | null {
  return sessionStorage.getItem(KEY);
}

// A browser drops requests in flight when the machine's network changes
// (Chromium: net::ERR_NETWORK_CHANGED, seen while a node made instances'
// interfaces beside it). The SDK retries safe requests after a network error;
// six tries with its doubling delay ride out about 15 s of changes, where its
// default three (1.75 s) left admin tables reading "Failed to fetch".
export function newClient(token: string): Client {
  return new Client({ url: location.origin, token, timeoutMs: 60_000, retries: 6 });
}

/**
 * Checks the token with the server and keeps it: the caller's tenant from
 * GET /v1/usage; admin when GET /v1/tokens lists another tenant's tokens or
 * an admin token (only an admin, or a tenant holding one, sees those).
 */
export async function signIn(token: string): Promise<Session> {
  const client = newClient(token);
  const usage = await client.usage();
  const tokens = await client.tokens.listOwn();
  const admin = tokens.some((t) => t.tenant !== usage.tenant || t.admin);
  sessionStorage.setItem(KEY, token);
  current = { client, tenant: usage.tenant, admin };
  return current;
}

export function signOut(message = ""): void {
  sessionStorage.removeItem(KEY);
  current = undefined;
  onSignedOut(message);
}

/** True for an error that means the token is no longer good. */
export function isUnauthenticated(e: unknown): boolean {
  return e instanceof EnvdError && (e.status === 401 || e.code === "unauthenticated");
}

/**
 * Runs f with the session's client. A 401 signs out with the server's
 * reason (token expired, revoked) and rejects with a SignedOut error that
 * pages ignore.
 */
export async function call<T>(f: (c: Client) => Promise<T>): Promise<T> {
  const s = current;
  if (!s) throw new SignedOut();
  try {
    return await f(s.client);
  } catch (e) {
    if (isUnauthenticated(e)) {
      signOut(`Signed out: the server refused the token (${(e as Error).message}). Sign in again.`);
      throw new SignedOut();
    }
    throw e;
  }
}

export class SignedOut extends Error {
  constructor() {
    super("signed out");
    this.name = "SignedOut";
  }
}
