// The part of autocannon 8's API the runner uses (the package ships no types).
declare module 'autocannon' {
  import type { EventEmitter } from 'node:events';

  interface AutocannonRequest {
    method?: string;
    path?: string;
    headers?: Record<string, string>;
    body?: string | Buffer;
    onResponse?: (
      status: number,
      body: string,
      context: Record<string, unknown>,
      headers: Record<string, string | string[]>,
    ) => void;
  }

  interface AutocannonOptions {
    url: string;
    connections?: number;
    duration?: number;
    amount?: number;
    timeout?: number;
    overallRate?: number;
    connectionRate?: number;
    pipelining?: number;
    method?: string;
    headers?: Record<string, string>;
    body?: string | Buffer;
    requests?: AutocannonRequest[];
    excludeErrorStats?: boolean;
    skipAggregateResult?: boolean;
  }

  interface AutocannonResult {
    requests: { total: number; average: number };
    latency: Record<string, number>;
    statusCodeStats: Record<string, { count: number }>;
    errors: number;
    timeouts: number;
    duration: number;
    non2xx: number;
  }

  interface Instance extends EventEmitter {
    stop(): void;
  }

  function autocannon(
    options: AutocannonOptions,
    callback: (error: Error | null, result: AutocannonResult) => void,
  ): Instance;
  export default autocannon;
}
