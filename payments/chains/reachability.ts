/**
 * Whether an enabled network's JSON-RPC endpoint answers now, within a short bound: the readiness
 * probe asks it of every enabled network, through the family of each (EVM: the latest block number;
 * Solana: the current slot; checkRpcReachable in registry.ts). The families race their request
 * against the bound with these.
 */

/**
 * The reason of a failed check without the endpoint's URL (API keys often live in it) or the
 * request: viem's short message and details, kit's error name, or the error class.
 */
function reasonOf(error: unknown): string {
  if (!(error instanceof Error)) return 'the RPC request failed';
  if (error.name === 'TimeoutError' || error.name === 'AbortError') return error.message;
  const { shortMessage, details } = error as Error & { shortMessage?: unknown; details?: unknown };
  const parts = [shortMessage, details].filter(
    (part): part is string => typeof part === 'string' && part.length > 0 && !part.includes('://'),
  );
  if (parts.length > 0) return parts.join(' ');
  const code = (error as Error & { context?: { __code?: unknown } }).context?.__code;
  return `${error.name}${typeof code === 'number' ? ` ${code}` : ''}`;
}

/** A request raced against `timeoutMs`, whatever bound the request keeps itself (viem keeps a longer one). */
export async function probe<T>(request: () => Promise<T>, timeoutMs: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<never>((_resolve, reject) => {
    timer = setTimeout(() => {
      const timeout = new Error(`no answer within ${timeoutMs} ms`);
      timeout.name = 'TimeoutError';
      reject(timeout);
    }, timeoutMs);
  });
  try {
    return await Promise.race([request(), expired]);
  } catch (error) {
    throw new Error(reasonOf(error), { cause: error });
  } finally {
    clearTimeout(timer);
  }
}

/** A request that carries its own abort signal of `timeoutMs` (kit's RPC). */
export async function abortableProbe<T>(request: () => Promise<T>, timeoutMs: number): Promise<T> {
  try {
    return await request();
  } catch (error) {
    if (error instanceof Error && (error.name === 'TimeoutError' || error.name === 'AbortError'))
      throw new Error(`no answer within ${timeoutMs} ms`, { cause: error });
    throw new Error(reasonOf(error), { cause: error });
  }
}
