/** Reading the Prometheus text of GET /metrics in tests. */

/** The value of one series of the exposition (labels as the service writes them, in order), or undefined. */
export function sample(text: string, series: string): number | undefined {
  for (const line of text.split('\n')) {
    if (line.startsWith(`${series} `)) return Number(line.slice(series.length + 1));
  }
  return undefined;
}

/** How much each series grew between two scrapes (a series absent before counts from 0). */
export function growth(before: string, after: string) {
  return (series: string): number => (sample(after, series) ?? 0) - (sample(before, series) ?? 0);
}
