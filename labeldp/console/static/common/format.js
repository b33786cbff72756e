// Numbers, times and sizes as people read them (English, UTC: the same on every screen and screenshot).

const grouped = new Intl.NumberFormat("en", { maximumFractionDigits: 0 });

/** 43152 → "43,152"; null → "—". */
export function count(value) {
  return value === null || value === undefined ? "—" : grouped.format(value);
}

/** A real number with up to ``digits`` significant digits (ε, losses, probabilities). */
export function num(value, digits = 4) {
  if (value === null || value === undefined) return "—";
  if (!Number.isFinite(value)) return String(value);
  if (value === 0) return "0";
  const abs = Math.abs(value);
  if (abs >= 1e15 || abs < 1e-4) return value.toExponential(Math.max(digits - 1, 1)).replace(/\.?0+e/, "e");
  if (abs >= 10 ** digits) return grouped.format(value);
  return new Intl.NumberFormat("en", { maximumSignificantDigits: digits }).format(value);
}

/** 0.1234 → "12.3%". */
export function pct(value, digits = 1) {
  if (value === null || value === undefined) return "—";
  return `${(value * 100).toFixed(digits)}%`;
}

/** An ISO time as "2026-11-24 13:14:05 UTC". */
export function when(iso) {
  if (!iso) return "—";
  const t = new Date(iso);
  if (Number.isNaN(t.getTime())) return String(iso);
  return `${t.toISOString().slice(0, 19).replace("T", " ")} UTC`;
}

/** Seconds as "1.5 s" or "2 min 05 s". */
export function seconds(value) {
  if (value === null || value === undefined) return "—";
  if (value < 60) return `${value.toFixed(1)} s`;
  const minutes = Math.floor(value / 60);
  return `${minutes} min ${String(Math.round(value - minutes * 60)).padStart(2, "0")} s`;
}

/** Bytes as "1.2 MiB". */
export function bytes(value) {
  if (value === null || value === undefined) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = value;
  let unit = 0;
  while (v >= 1024 && unit < units.length - 1) {
    v /= 1024;
    unit += 1;
  }
  return `${unit === 0 ? v : v.toFixed(1)} ${units[unit]}`;
}

/** The first characters of a long ID or digest, for tables (the full value stays in a title). */
export function short(id, length = 8) {
  return id ? String(id).slice(0, length) : "—";
}

/** "1 release", "3 releases" (with the count grouped). */
export function plural(n, word, many = `${word}s`) {
  return `${count(n)} ${n === 1 ? word : many}`;
}
