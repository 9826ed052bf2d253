// The page's style nonce: index.html carries it in a meta element (the
// server writes a fresh one into each answer, with the same value in its
// Content-Security-Policy). Only <style> elements made through noncedStyle
// are applied; build.mjs routes xterm.js's through it.

let nonce: string | undefined;

export function styleNonce(): string {
  if (nonce === undefined) {
    nonce = document.querySelector<HTMLMetaElement>('meta[name="envd-style-nonce"]')?.content ?? "";
  }
  return nonce;
}

export function noncedStyle(doc: Document): HTMLStyleElement {
  const el = doc.createElement("style");
  const n = styleNonce();
  if (n) el.nonce = n;
  return el;
}
