// Every metric the service registers (server/metrics.ts) has its row in the document's table of
// GET /metrics (openapi/operations/getMetrics/operation.yaml), and the table names no metric the
// service does not register: an operator reads that table to write alerts.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = path.resolve(import.meta.dirname, '../..');
const read = (file: string) => readFileSync(path.join(ROOT, file), 'utf8');

describe('the metrics of GET /metrics', () => {
  it('are each documented in the table of the operation, and the table lists no other', () => {
    const registered = [...read('server/metrics.ts').matchAll(/'(prs_[a-z_]+)'/g)].map((match) => match[1]);
    const documented = [
      ...read('openapi/operations/getMetrics/operation.yaml').matchAll(/^\s*\| `(prs_[a-z_]+)` \|/gm),
    ].map((match) => match[1]);
    expect(registered.length).toBeGreaterThan(5);
    expect([...documented].sort()).toEqual([...new Set(registered)].sort());
  });
});
