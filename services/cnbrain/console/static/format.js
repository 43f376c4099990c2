// How numbers, shares, times and durations read on the pages.

export function pct(share) {
  if (share === null || share === undefined) return "–";
  const value = share * 100;
  return `${value > 0 && value < 10 ? value.toFixed(1) : Math.round(value)} %`;
}

export function num(value, digits = 1) {
  if (value === null || value === undefined) return "–";
  return value.toLocaleString("en", { maximumFractionDigits: digits });
}

/** `iso` as "2026-12-06 16:23 UTC". */
export function when(iso) {
  if (!iso) return "–";
  return `${new Date(iso).toISOString().slice(0, 16).replace("T", " ")} UTC`;
}

/** A span of seconds as "3 d 4 h", "2 h 5 min", "5 min 3 s" or "42 s". */
export function duration(seconds) {
  const s = Math.max(0, Math.round(seconds));
  const parts = [
    [Math.floor(s / 86400), "d"],
    [Math.floor((s % 86400) / 3600), "h"],
    [Math.floor((s % 3600) / 60), "min"],
    [s % 60, "s"],
  ];
  const first = parts.findIndex(([n]) => n > 0);
  if (first < 0) return "0 s";
  return parts
    .slice(first, first + 2)
    .filter(([n]) => n > 0)
    .map(([n, unit]) => `${n} ${unit}`)
    .join(" ");
}

/** Seconds from now to `iso` (negative: in the past). */
export const fromNow = (iso) => (new Date(iso).getTime() - Date.now()) / 1000;
