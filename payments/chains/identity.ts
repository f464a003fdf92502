/**
 * Whether an enabled network's RPC serves that network's chain: its eth_chainId (EVM) or genesis
 * hash (Solana) against the network's row. Asked of every enabled network at start, where another
 * chain stops the start, and by the readiness probe, where it fails the network's check. The
 * messages name the variable the URL came from and show the URL without its secrets.
 */
import { envSuffix, urlShownPart, type NetworkSettings } from '../basics/config';
import { NETWORK_TABLE } from '../basics/networkTable';
import { familyOf } from './registry';
import type { Chains } from './types';

/** The chain the RPC serves: the network's, another (with the message that says so), or no answer. */
export type IdentityCheck =
  { kind: 'same' } | { kind: 'other'; variable: string; message: string } | { kind: 'unreachable'; reason: string };

/** The network's variable of its RPC URL and the message, `variable` not included, of a URL serving another chain. */
function mismatch(
  settings: NetworkSettings,
  answered: string,
  expected: string,
): { variable: string; message: string } {
  const { label } = NETWORK_TABLE[settings.name];
  const shown = urlShownPart(settings.rpcUrl) ?? 'its URL';
  const whose = `${settings.name} (${label}) is ${expected}`;
  return settings.rpcVariable === undefined
    ? {
        variable: `RPC_URL_${envSuffix(settings.name)}`,
        message: `is not set, and the public RPC endpoint ${shown} answers ${answered}, but ${whose}`,
      }
    : { variable: settings.rpcVariable, message: `points at ${shown}, which answers ${answered}, but ${whose}` };
}

export async function checkChainIdentity(
  chains: Chains,
  settings: NetworkSettings,
  timeoutMs: number,
): Promise<IdentityCheck> {
  try {
    const identity = await familyOf(settings.name).chainIdentity(chains, settings.name, timeoutMs);
    return identity.kind === 'same'
      ? identity
      : { kind: 'other', ...mismatch(settings, identity.answered, identity.expected) };
  } catch (error) {
    return { kind: 'unreachable', reason: error instanceof Error ? error.message : String(error) };
  }
}

/** For the readiness probe: resolves when the RPC serves the network's chain, rejects with what it serves otherwise. */
export async function requireChainIdentity(
  chains: Chains,
  settings: NetworkSettings,
  timeoutMs: number,
): Promise<void> {
  const checked = await checkChainIdentity(chains, settings, timeoutMs);
  if (checked.kind === 'other') throw new Error(`${checked.variable} ${checked.message}`);
  if (checked.kind === 'unreachable') throw new Error(checked.reason);
}
