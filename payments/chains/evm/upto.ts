/**
 * The upto scheme on EVM networks (x402 version 2, @x402/evm 2.27): the payer signs, through
 * Permit2, a maximum whose spender is the x402UptoPermit2Proxy and whose witness names the
 * recipient and the one facilitator allowed to settle it (`extra.facilitatorAddress` of the
 * offer); that facilitator settles the amount used, at most the maximum. We pay targets this way,
 * signing exactly as @x402/evm's upto client does (uptoPermit2WitnessTypes, validAfter 0, the
 * deadline now + maxTimeoutSeconds), after the same checks as an exact Permit2 payment
 * (permit2Terms) and with the same one approval of Permit2 per token (approval.ts).
 *
 * Here too: the scheme's wire side (x402/schemes.ts) for the registry, and what the chain says a
 * settlement of ours moved (uptoSettlement): the amount comes from the token's Transfer logs from
 * our wallet to the recipient in a successful transaction of the upto proxy, never from a
 * target's word.
 */
import {
  decodeFunctionData,
  getAddress,
  hashTypedData,
  isAddress,
  parseAbi,
  parseEventLogs,
  zeroAddress,
  type Address,
  type Hash,
  type Hex,
} from 'viem';
import type { PrivateKeyAccount } from 'viem/accounts';
import type { NetworkName } from '../../basics/networkTable';
import { fail, ok, type Result } from '../../basics/result';
import { isPlainObject } from '../../x402/parse';
import type { PaymentScheme } from '../../x402/schemes';
import { X402_VERSION, type PaymentPayload, type PaymentRequirements, type UptoPermit2Payload } from '../../x402/types';
import type { SignFailureReason } from './authorization';
import type { ClientsOf, EvmNetworkClients } from './clients';
import { permit2Domain, permit2Terms } from './permit2';
import { uptoPermit2WitnessTypes } from './uptoIncoming/digest';
import { checkUptoPayload, permit2NonceHex, UPTO_PERMIT2_PROXY_ADDRESS } from './uptoIncoming/payload';

export { UPTO_PERMIT2_PROXY_ADDRESS, uptoPermit2WitnessTypes };

/** The facilitator an upto offer names (`extra.facilitatorAddress`), or what is wrong with it. */
function uptoFacilitator(
  requirements: Pick<PaymentRequirements, 'extra'>,
):
  | { ok: true; address: Address }
  | { ok: false; reason: 'missing_facilitator' | 'invalid_facilitator'; details: string } {
  const named = requirements.extra?.facilitatorAddress;
  if (named === undefined || named === null || named === '')
    return { ok: false, reason: 'missing_facilitator', details: 'an upto offer needs extra.facilitatorAddress' };
  if (typeof named !== 'string' || !isAddress(named, { strict: false }) || named.toLowerCase() === zeroAddress)
    return { ok: false, reason: 'invalid_facilitator', details: 'extra.facilitatorAddress is not an EVM address' };
  return { ok: true, address: getAddress(named) };
}

function isUptoPayload(payload: object): payload is UptoPermit2Payload {
  const authorization = (payload as { permit2Authorization?: { witness?: unknown } }).permit2Authorization;
  return isPlainObject(authorization) && isPlainObject(authorization.witness) && 'facilitator' in authorization.witness;
}

export const UPTO_EVM: PaymentScheme = {
  scheme: 'upto',
  transferMethods: ['permit2'],
  // An upto offer moves its asset through Permit2 whatever its network's own method is.
  defaultTransferMethod: 'permit2',
  checkPayload: checkUptoPayload,
  sameAsset: (asset, configured) => asset.toLowerCase() === configured.toLowerCase(),
  recognizes: (payload) => isUptoPayload(payload),
  replayIdentity: (payload) => {
    const { permit2Authorization } = payload as UptoPermit2Payload;
    return {
      payer: permit2Authorization.from.toLowerCase(),
      payment: permit2NonceHex(BigInt(permit2Authorization.nonce)),
    };
  },
  recipientProblem: (requirements) => {
    if (!isAddress(requirements.payTo) || requirements.payTo.toLowerCase() === zeroAddress)
      return { reason: 'invalid_pay_to', details: `payTo ${requirements.payTo} is not an EVM address` };
    const facilitator = uptoFacilitator(requirements);
    return facilitator.ok ? undefined : { reason: facilitator.reason, details: facilitator.details };
  },
};

export interface SignedUpto {
  network: NetworkName;
  payment: PaymentPayload<UptoPermit2Payload, 'upto'>;
  /** The Permit2 nonce as 32 bytes of hex: how the payment is recorded and looked up. */
  nonce: Hex;
  /** The first second at which Permit2 refuses the permit (deadline + 1). */
  unusableFrom: bigint;
}

/**
 * Our upto permit for a target's offer: at most its amount (the maximum), to its payTo, settled
 * only by the facilitator it names, from now until now + maxTimeoutSeconds.
 */
export async function signUptoPermit2Transfer(
  wallet: { clientsOf: ClientsOf; account: PrivateKeyAccount | undefined },
  requirements: PaymentRequirements,
  signing: { now: Date; nonce: Hex },
): Promise<Result<SignedUpto, SignFailureReason>> {
  const terms = permit2Terms(wallet, requirements, signing);
  if (!terms.ok) return terms;
  const facilitator = uptoFacilitator(requirements);
  if (!facilitator.ok) return fail('invalid_requirements', facilitator.details);
  const { network, account, chainId, token, payTo, amount, deadline, nonce } = terms.value;
  const authorization: UptoPermit2Payload['permit2Authorization'] = {
    from: account.address,
    permitted: { token, amount: amount.toString() },
    spender: UPTO_PERMIT2_PROXY_ADDRESS,
    nonce: BigInt(nonce).toString(),
    deadline: deadline.toString(),
    witness: { to: payTo, facilitator: facilitator.address, validAfter: '0' },
  };
  const signature = await account.sign({
    hash: hashTypedData({
      domain: permit2Domain(chainId),
      types: uptoPermit2WitnessTypes,
      primaryType: 'PermitWitnessTransferFrom',
      message: {
        permitted: { token, amount },
        spender: UPTO_PERMIT2_PROXY_ADDRESS,
        nonce: BigInt(nonce),
        deadline,
        witness: { to: payTo, facilitator: facilitator.address, validAfter: 0n },
      },
    }),
  });
  return ok({
    network,
    payment: {
      x402Version: X402_VERSION,
      scheme: 'upto',
      network: requirements.network,
      payload: { signature, permit2Authorization: authorization },
    },
    nonce,
    unusableFrom: deadline + 1n,
  });
}

/** What an upto payment of ours allows, read from its signed payload: the recipient, the maximum, the token. */
export interface UptoAllowance {
  payTo: Address;
  maximum: bigint;
  token: Address;
}

export function uptoAllowanceOf(
  payment: { scheme?: string; payload?: unknown } | null | undefined,
): UptoAllowance | undefined {
  if (payment?.scheme !== 'upto' || !isPlainObject(payment.payload)) return undefined;
  const checked = checkUptoPayload(payment.payload);
  if (!checked.ok) return undefined;
  const { permitted, witness } = checked.value.permit2Authorization;
  return { payTo: getAddress(witness.to), maximum: BigInt(permitted.amount), token: getAddress(permitted.token) };
}

const transferEvent = parseAbi(['event Transfer(address indexed from, address indexed to, uint256 value)']);
const uptoSettleAbi = parseAbi([
  'struct TokenPermissions { address token; uint256 amount; }',
  'struct PermitTransferFrom { TokenPermissions permitted; uint256 nonce; uint256 deadline; }',
  'struct Witness { address to; address facilitator; uint256 validAfter; }',
  'struct EIP2612Permit { uint256 value; uint256 deadline; bytes32 r; bytes32 s; uint8 v; }',
  'function settle(PermitTransferFrom permit, uint256 amount, address owner, Witness witness, bytes signature)',
  'function settleWithPermit(EIP2612Permit permit2612, PermitTransferFrom permit, uint256 amount, address owner, Witness witness, bytes signature)',
]);
const settledEvents = parseAbi(['event Settled()', 'event SettledWithPermit()']);

export type UptoSettlementReading =
  /** The transaction settled our permit: `amount` (the token's atomic units) moved from us to the recipient. */
  | { state: 'settled'; amount: bigint; details: string }
  /** The transaction is not (yet) a settlement of this permit we can read. */
  | { state: 'not_ours'; details: string }
  | { state: 'unknown'; details: string };

/**
 * What transaction `hash` shows about our upto permit: a successful transaction in which the upto
 * proxy settled (its Settled event), carrying the token's Transfer log(s) from our wallet to the
 * permit's recipient. When the transaction calls the proxy directly, its arguments must name our
 * permit (owner, nonce, recipient) and its amount must be what the logs moved; otherwise (a
 * settlement bundled by another contract) exactly one such Transfer must be in it. The amount is
 * never above the maximum (the proxy refuses more).
 */
export async function uptoSettlement(
  clients: EvmNetworkClients,
  payment: { payer: string; nonce: string },
  allowance: UptoAllowance,
  hash: string,
): Promise<UptoSettlementReading> {
  if (!/^0x[0-9a-fA-F]{64}$/.test(hash)) return { state: 'not_ours', details: `${hash} is not a transaction hash` };
  let receipt;
  let transaction;
  try {
    receipt = await clients.publicClient.getTransactionReceipt({ hash: hash as Hash });
    transaction = await clients.publicClient.getTransaction({ hash: hash as Hash });
  } catch (error) {
    return { state: 'unknown', details: `transaction ${hash} cannot be read yet: ${String(error).slice(0, 200)}` };
  }
  if (receipt.status !== 'success') return { state: 'not_ours', details: `transaction ${hash} reverted` };
  const proxySettled = parseEventLogs({ abi: settledEvents, logs: receipt.logs }).some(
    (log) => log.address.toLowerCase() === UPTO_PERMIT2_PROXY_ADDRESS.toLowerCase(),
  );
  if (!proxySettled) return { state: 'not_ours', details: `transaction ${hash} is no settlement of the upto proxy` };
  const payer = payment.payer.toLowerCase();
  const transfers = parseEventLogs({ abi: transferEvent, logs: receipt.logs, eventName: 'Transfer' }).filter(
    (log) =>
      log.address.toLowerCase() === allowance.token.toLowerCase() &&
      log.args.from.toLowerCase() === payer &&
      log.args.to.toLowerCase() === allowance.payTo.toLowerCase(),
  );
  if (transfers.length === 0)
    return { state: 'not_ours', details: `transaction ${hash} moved nothing from our wallet to ${allowance.payTo}` };
  const moved = transfers.reduce((sum, log) => sum + log.args.value, 0n);
  if (transaction.to?.toLowerCase() === UPTO_PERMIT2_PROXY_ADDRESS.toLowerCase()) {
    let call;
    try {
      call = decodeFunctionData({ abi: uptoSettleAbi, data: transaction.input });
    } catch {
      return { state: 'not_ours', details: `transaction ${hash} is no settle call of the upto proxy` };
    }
    const [permit, amount, owner, witness] = call.functionName === 'settle' ? call.args : call.args.slice(1);
    const settled = { permit, amount, owner, witness } as {
      permit: { nonce: bigint };
      amount: bigint;
      owner: Address;
      witness: { to: Address };
    };
    if (
      settled.owner.toLowerCase() !== payer ||
      settled.permit.nonce !== BigInt(payment.nonce) ||
      settled.witness.to.toLowerCase() !== allowance.payTo.toLowerCase()
    )
      return { state: 'not_ours', details: `transaction ${hash} settles another permit` };
    if (settled.amount !== moved)
      return { state: 'unknown', details: `transaction ${hash} settles ${settled.amount} but its logs move ${moved}` };
  } else if (transfers.length !== 1) {
    return {
      state: 'unknown',
      details: `transaction ${hash} bundles ${transfers.length} transfers from our wallet to ${allowance.payTo}; which one is this permit's cannot be told`,
    };
  }
  if (moved > allowance.maximum)
    return { state: 'unknown', details: `transaction ${hash} moved ${moved}, above the maximum ${allowance.maximum}` };
  return { state: 'settled', amount: moved, details: `settled ${moved} of at most ${allowance.maximum} in ${hash}` };
}

/** findUptoSettlement reads at most this many candidate transactions per sweep. */
export const MAX_UPTO_CANDIDATES = 50;

/**
 * Looks for the settlement of our permit among the token's Transfer logs from our wallet to the
 * recipient, newest blocks first, at most `maxBlocks` back in chunks of `chunkBlocks` and at most
 * MAX_UPTO_CANDIDATES transactions read (a bounded sweep: the caller looks again later when
 * nothing is found).
 */
export async function findUptoSettlement(
  clients: EvmNetworkClients,
  payment: { payer: string; nonce: string },
  allowance: UptoAllowance,
  { maxBlocks, chunkBlocks }: { maxBlocks: bigint; chunkBlocks: bigint },
): Promise<UptoSettlementReading & { txHash?: string }> {
  let latest: bigint;
  try {
    latest = await clients.publicClient.getBlockNumber({ cacheTime: 0 });
  } catch (error) {
    return { state: 'unknown', details: `the chain cannot be read: ${String(error).slice(0, 200)}` };
  }
  const lowest = latest - maxBlocks + 1n > 0n ? latest - maxBlocks + 1n : 0n;
  const seen = new Set<string>();
  for (let toBlock = latest; toBlock >= lowest; toBlock -= chunkBlocks) {
    const fromBlock = toBlock - chunkBlocks + 1n > lowest ? toBlock - chunkBlocks + 1n : lowest;
    let logs;
    try {
      logs = await clients.publicClient.getLogs({
        address: allowance.token,
        event: transferEvent[0],
        args: { from: getAddress(payment.payer), to: allowance.payTo },
        fromBlock,
        toBlock,
      });
    } catch (error) {
      return { state: 'unknown', details: `the token's logs cannot be read: ${String(error).slice(0, 200)}` };
    }
    for (const log of [...logs].reverse()) {
      // RPC data: a node may answer a log of a pending block, without a hash, whatever the types say.
      const hash = log.transactionHash as Hash | null;
      if (hash === null || seen.has(hash)) continue;
      if (seen.size >= MAX_UPTO_CANDIDATES)
        return {
          state: 'unknown',
          details: `the permit is spent; its settlement is not among the newest ${MAX_UPTO_CANDIDATES} transfers from our wallet to ${allowance.payTo}`,
        };
      seen.add(hash);
      const reading = await uptoSettlement(clients, payment, allowance, hash);
      if (reading.state !== 'not_ours') return { ...reading, txHash: hash };
    }
  }
  return {
    state: 'unknown',
    details: `the permit is spent, but its settlement is not among the transfers of the last ${maxBlocks} blocks`,
  };
}
