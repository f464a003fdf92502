/** Latency samples (milliseconds, sub-millisecond precision) and their summary. */
import { itemAt } from './checked';

export interface LatencySummary {
  count: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
  mean: number;
}

export class Samples {
  private values = new Float64Array(1024);
  private size = 0;

  add(value: number): void {
    if (this.size === this.values.length) {
      const grown = new Float64Array(this.values.length * 2);
      grown.set(this.values);
      this.values = grown;
    }
    this.values[this.size++] = value;
  }

  get count(): number {
    return this.size;
  }

  summary(): LatencySummary {
    if (this.size === 0) return { count: 0, p50: NaN, p90: NaN, p99: NaN, max: NaN, mean: NaN };
    const sorted = this.values.slice(0, this.size).sort();
    const at = (q: number) =>
      itemAt(sorted, Math.min(this.size - 1, Math.max(0, Math.ceil(q * this.size) - 1)), 'the samples');
    let total = 0;
    for (const value of sorted) total += value;
    return {
      count: this.size,
      p50: at(0.5),
      p90: at(0.9),
      p99: at(0.99),
      max: itemAt(sorted, this.size - 1, 'the samples'),
      mean: total / this.size,
    };
  }
}

export function median(values: number[]): number {
  const finite = values.filter((value) => Number.isFinite(value)).sort((a, b) => a - b);
  if (finite.length === 0) return NaN;
  const middle = Math.floor(finite.length / 2);
  const at = (index: number) => itemAt(finite, index, 'median');
  return finite.length % 2 === 1 ? at(middle) : (at(middle - 1) + at(middle)) / 2;
}
