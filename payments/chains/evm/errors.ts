/** What a failed EVM call says: the revert reason a contract gave, or a read's failure as a Result. */
import { BaseError, decodeErrorResult, HttpRequestError, isHex, TimeoutError, type Hex } from 'viem';
import { fail } from '../../basics/result';

export type ReadFailureReason = 'network_not_enabled' | 'invalid_argument' | 'rpc_timeout' | 'rpc_error';

/** Revert data as nodes attach it: a hex string, or (hardhat, some providers) `{message, data}`. */
function revertDataOf(value: unknown): Hex | undefined {
  if (isHex(value, { strict: true }) && value.length >= 10) return value;
  if (value !== null && typeof value === 'object' && 'data' in value) return revertDataOf(value.data);
  return undefined;
}

/**
 * Why a contract call or a gas estimate reverted, as the contract said it: the Error(string) reason
 * (e.g. "FiatTokenV2: authorization is not yet valid"), a panic code, or a custom error's selector.
 * Nodes differ in where they put the revert data (hardhat answers -32603 with it nested, geth code 3
 * with it beside the message), so every cause is searched. Undefined when the node gave no data and
 * no reason in words: the caller then has only the node's generic message.
 */
export function revertReason(error: unknown): string | undefined {
  const causes: unknown[] = [];
  if (error instanceof BaseError) {
    error.walk((cause) => {
      causes.push(cause);
      return false;
    });
  } else {
    causes.push(error);
  }
  for (const cause of causes) {
    const data = revertDataOf((cause as { data?: unknown } | null)?.data);
    if (data === undefined) continue;
    try {
      const decoded = decodeErrorResult({ data });
      if (decoded.errorName === 'Error') return String(decoded.args[0]);
      if (decoded.errorName === 'Panic') return `panic 0x${(decoded.args[0] as bigint).toString(16)}`;
      return decoded.errorName;
    } catch {
      return `custom error ${data.slice(0, 10)}`;
    }
  }
  // No data, but some nodes still say the reason in the message.
  for (const cause of causes) {
    // A cause is anything thrown, null and undefined included.
    const described = cause as { details?: unknown; message?: unknown } | null | undefined;
    const message = [described?.details, described?.message].filter((text) => typeof text === 'string').join('\n');
    const said =
      /reverted with reason string '([^']*)'/.exec(message)?.[1] ?? /execution reverted: ([^\n]+)/.exec(message)?.[1];
    if (said) return said.trim();
  }
  return undefined;
}

export function readFailure(error: unknown): { ok: false; reason: ReadFailureReason; details: string } {
  const timedOut = error instanceof BaseError ? error.walk((cause) => cause instanceof TimeoutError) !== null : false;
  if (timedOut) return fail('rpc_timeout', 'the RPC endpoint did not answer in time');
  const message =
    error instanceof BaseError ? error.shortMessage : error instanceof Error ? error.message : String(error);
  return fail('rpc_error', message);
}

/** Whether a failed call never reached an answer: the node timed out or could not be reached. */
export function isRpcUnavailable(error: unknown): boolean {
  if (!(error instanceof BaseError)) return false;
  return error.walk((cause) => cause instanceof TimeoutError || cause instanceof HttpRequestError) !== null;
}

export function rpcUnavailable(error: unknown): { ok: false; reason: 'rpc_unavailable'; details: string } {
  const message =
    error instanceof BaseError ? error.shortMessage : error instanceof Error ? error.message : String(error);
  return fail('rpc_unavailable', message);
}

/** A dry run that reverted: the contract's own reason when the node returned one (the payer can act on it). */
export function simulationFailed(error: unknown): { ok: false; reason: 'simulation_failed'; details: string } {
  const reason = revertReason(error);
  if (reason !== undefined) return fail('simulation_failed', `the transfer reverts: ${reason}`);
  return fail('simulation_failed', error instanceof BaseError ? error.shortMessage : String(error));
}
