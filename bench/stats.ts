/**
 * Small statistics over samples, shared by the figures (bench/common.ts
 * re-exports them) and the report, which needs no test host to use them.
 */

export function median(xs: readonly number[]): number {
  if (xs.length === 0) return Number.NaN;
  const s = [...xs].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 ? (s[mid] as number) : ((s[mid - 1] as number) + (s[mid] as number)) / 2;
}

export function minMax(xs: readonly number[]): [number, number] {
  return [Math.min(...xs), Math.max(...xs)];
}

/** Median and range of per-round ratios a[i]/b[i] (a round pairs contenders that ran side by side). */
export function pairedRatio(
  a: readonly number[],
  b: readonly number[],
): { median: number; range: [number, number] } {
  const ratios = a.map((x, i) => x / (b[i] as number));
  return { median: median(ratios), range: minMax(ratios) };
}
