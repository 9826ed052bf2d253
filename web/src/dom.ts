// A few helpers to build the page with the DOM API: text is always set as
// text (never parsed as HTML), and no element gets a style attribute (the
// Content-Security-Policy refuses them).

export type Child = Node | string | number | null | undefined | false | Child[];

export interface Attrs {
  [name: string]: string | number | boolean | undefined | null | EventListener;
}

/** Makes an element: h("button", {type: "button", onclick: f}, "Save"). */
export function h<K extends keyof HTMLElementTagNameMap>(tag: K, attrs: Attrs | null = null, ...children: Child[]): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  if (attrs) {
    for (const [k, v] of Object.entries(attrs)) {
      if (v === undefined || v === null || v === false) continue;
      if (k.startsWith("on") && typeof v === "function") {
        el.addEventListener(k.slice(2), v as EventListener);
      } else if (k === "style") {
        throw new Error("dom: style attributes are refused by the page's policy; use a class");
      } else if (v === true) {
        el.setAttribute(k, "");
      } else {
        el.setAttribute(k, String(v));
      }
    }
  }
  append(el, children);
  return el;
}

export function append(el: Node, children: Child[]): void {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(String(c)));
  }
}

/** Replaces el's children. */
export function replace(el: Element, ...children: Child[]): void {
  el.replaceChildren();
  append(el, children);
}

/** SVG elements (the history chart). */
export function svg(tag: string, attrs: Record<string, string | number> = {}, ...children: (Node | string)[]): SVGElement {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  for (const c of children) el.append(c);
  return el;
}

/** A labelled input: returns [the wrapper, the input]. */
export function field(label: string, input: HTMLInputElement | HTMLSelectElement | HTMLTextAreaElement, hint?: string): HTMLElement {
  if (!input.id) input.id = uid("f");
  const parts: Child[] = [h("label", { for: input.id }, label), input];
  if (hint) {
    const hid = uid("hint");
    input.setAttribute("aria-describedby", hid);
    parts.push(h("small", { id: hid, class: "hint" }, hint));
  }
  return h("div", { class: "field" }, parts);
}

let seq = 0;
export function uid(prefix: string): string {
  return `${prefix}-${++seq}`;
}

/** A button that runs an async action, disabled while it runs. */
export function button(label: string, action: (b: HTMLButtonElement) => unknown, attrs: Attrs = {}): HTMLButtonElement {
  const b = h("button", { type: "button", ...attrs }, label);
  b.addEventListener("click", async () => {
    if (b.disabled) return;
    b.disabled = true;
    b.setAttribute("aria-busy", "true");
    try {
      await action(b);
    } finally {
      b.disabled = false;
      b.removeAttribute("aria-busy");
    }
  });
  return b;
}
