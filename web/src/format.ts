// How numbers, sizes and times read on the page.

export function bytes(n: number | undefined): string {
  if (n === undefined || n === null || !Number.isFinite(n)) return "-";
  if (n < 0) return "-";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = n;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return i === 0 ? `${n} B` : `${v < 10 ? v.toFixed(1) : Math.round(v)} ${units[i]}`;
}

export function time(iso: string | undefined): string {
  if (!iso) return "-";
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return iso;
  return d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

/** "in 59m", "3m ago". */
export function relative(iso: string | undefined, now = Date.now()): string {
  if (!iso) return "-";
  const t = new Date(iso).getTime();
  if (Number.isNaN(t)) return iso;
  const s = Math.round((t - now) / 1000);
  const d = duration(Math.abs(s));
  return s >= 0 ? `in ${d}` : `${d} ago`;
}

export function duration(seconds: number): string {
  if (seconds < 60) return `${seconds}s`;
  const m = Math.floor(seconds / 60);
  if (m < 60) return `${m}m`;
  const hr = Math.floor(m / 60);
  if (hr < 48) return `${hr}h ${m % 60}m`;
  return `${Math.floor(hr / 24)}d ${hr % 24}h`;
}

export function yesNo(b: boolean | undefined): string {
  return b ? "yes" : "no";
}

/**
 * The bytes a version added: its image's size less its parent's (a save is
 * the parent's layers plus one), or the whole image for a base version.
 */
export function layerBytes(v: { version: number; parent?: number; size_bytes: number; kind: string }, all: { version: number; size_bytes: number }[]): number {
  if (!v.parent) return v.kind === "base" ? 0 : v.size_bytes;
  const p = all.find((x) => x.version === v.parent);
  return p ? Math.max(0, v.size_bytes - p.size_bytes) : v.size_bytes;
}
