/**
 * Timing of the JSON-RPC requests our chain clients send, reported to whoever built the chains
 * (the service's metrics). The observer is told the network, the method, the time to the answer
 * and whether it was a successful answer; it is never told a URL or a parameter.
 */
import type { NetworkName } from '../basics/networkTable';

export type RpcObserver = (network: NetworkName, method: string, seconds: number, ok: boolean) => void;

/** Runs one request and reports it; an observer that throws never breaks the request. */
export async function observed<T>(
  observe: RpcObserver | undefined,
  network: NetworkName,
  method: string,
  send: () => Promise<T>,
): Promise<T> {
  if (!observe) return send();
  const startedAt = performance.now();
  const report = (ok: boolean) => {
    try {
      observe(network, method, (performance.now() - startedAt) / 1000, ok);
    } catch {
      // Metrics are never worth a failed payment.
    }
  };
  try {
    const result = await send();
    report(true);
    return result;
  } catch (error) {
    report(false);
    throw error;
  }
}

/** The method of a JSON-RPC request payload, or `unknown`. */
export function methodOf(payload: unknown): string {
  const method = (payload as { method?: unknown } | null | undefined)?.method;
  return typeof method === 'string' ? method : 'unknown';
}
