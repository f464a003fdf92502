/**
 * Paying a target through Permit2 (x402 `exact` with `extra.assetTransferMethod: "permit2"`), as
 * @x402/evm 2.27's exact client does: our wallet approves the canonical Permit2 contract once per
 * token, then signs a Permit2 PermitWitnessTransferFrom whose spender is x402ExactPermit2Proxy and
 * whose witness names the target's payTo; the target's facilitator has the proxy settle it. The
 * payload is `{signature, permit2Authorization}` with decimal strings. Also the reads of such a
 * payment afterwards: Permit2's nonce bitmap says whether the permit was spent.
 */
import { getAddress, hashTypedData, isAddress, parseAbi, zeroAddress, type Address, type Hex } from 'viem';
import type { PrivateKeyAccount } from 'viem/accounts';
import { canonicalNetwork, NETWORK_TABLE, type NetworkName } from '../../basics/networkTable';
import { fail, ok, type Result } from '../../basics/result';
import {
  X402_VERSION,
  type ExactPermit2Payload,
  type PaymentPayload,
  type PaymentRequirements,
} from '../../x402/types';
import type { SignFailureReason } from './authorization';
import type { ClientsOf } from './clients';
import { readFailure, type ReadFailureReason } from './errors';

export const PERMIT2_ADDRESS: Address = '0x000000000022D473030F116dDEE9F6B43aC78BA3';
export const EXACT_PERMIT2_PROXY_ADDRESS: Address = '0x402085c248EeA27D92E8b30b2C58ed07f9E20001';

/** The EIP-712 types @x402/evm's exact client signs for Permit2 (its permit2WitnessTypes). */
export const permit2WitnessTypes = {
  PermitWitnessTransferFrom: [
    { name: 'permitted', type: 'TokenPermissions' },
    { name: 'spender', type: 'address' },
    { name: 'nonce', type: 'uint256' },
    { name: 'deadline', type: 'uint256' },
    { name: 'witness', type: 'Witness' },
  ],
  TokenPermissions: [
    { name: 'token', type: 'address' },
    { name: 'amount', type: 'uint256' },
  ],
  Witness: [
    { name: 'to', type: 'address' },
    { name: 'validAfter', type: 'uint256' },
  ],
} as const;

const permit2Abi = parseAbi(['function nonceBitmap(address owner, uint256 wordPos) view returns (uint256)']);
export const erc20ApprovalAbi = parseAbi([
  'function allowance(address owner, address spender) view returns (uint256)',
  'function approve(address spender, uint256 amount) returns (bool)',
]);

/** Whether the target asks to be paid through Permit2: exact with `assetTransferMethod: "permit2"`, or upto (always Permit2). */
export function asksPermit2(requirements: Pick<PaymentRequirements, 'scheme' | 'extra'>): boolean {
  return requirements.scheme === 'upto' || requirements.extra?.assetTransferMethod === 'permit2';
}

export interface Permit2Authorization {
  from: Address;
  permitted: { token: Address; amount: string };
  spender: Address;
  nonce: string;
  deadline: string;
  witness: { to: Address; validAfter: string };
}

export interface SignedPermit2 {
  network: NetworkName;
  payment: PaymentPayload<ExactPermit2Payload>;
  /** The Permit2 nonce as 32 bytes of hex: how the payment is recorded and looked up. */
  nonce: Hex;
  /** The first second at which Permit2 refuses the permit (deadline + 1: it accepts up to the deadline). */
  unusableFrom: bigint;
}

/**
 * What every Permit2 payment of ours to a target checks and computes first, exact and upto alike:
 * an EVM network we serve with our wallet, the asset our configured stablecoin there (a permit
 * names the token it moves), an EVM payTo that is not the zero address, a positive amount, a
 * positive time window and a 32-byte nonce; the deadline is now + maxTimeoutSeconds.
 */
export interface Permit2Terms {
  network: NetworkName;
  account: PrivateKeyAccount;
  chainId: number;
  token: Address;
  payTo: Address;
  /** The amount permitted (for upto: the maximum), in the token's atomic units. */
  amount: bigint;
  deadline: bigint;
  nonce: Hex;
}

export function permit2Terms(
  { clientsOf, account }: { clientsOf: ClientsOf; account: PrivateKeyAccount | undefined },
  requirements: PaymentRequirements,
  { now, nonce }: { now: Date; nonce: Hex },
): Result<Permit2Terms, SignFailureReason> {
  const network = canonicalNetwork(requirements.network);
  if (network === undefined || NETWORK_TABLE[network].chainType !== 'evm')
    return fail('not_evm_network', `${requirements.network} is not an EVM network`);
  const clients = clientsOf(network);
  if (!clients.ok) return clients;
  if (account === undefined) return fail('no_wallet', 'EVM_PRIVATE_KEY is not configured');
  // We permit only our configured stablecoin: the permit names the token it moves.
  if (!isAddress(requirements.asset, { strict: false }) || getAddress(requirements.asset) !== clients.value.usdc)
    return fail('asset_mismatch', `asset ${requirements.asset} is not the stablecoin we pay in on ${network}`);
  if (!isAddress(requirements.payTo) || requirements.payTo.toLowerCase() === zeroAddress)
    return fail('invalid_requirements', `payTo ${requirements.payTo} is not an EVM address`);
  if (!/^[1-9][0-9]*$/.test(requirements.maxAmountRequired))
    return fail('invalid_requirements', 'maxAmountRequired is not a positive integer');
  if (!Number.isSafeInteger(requirements.maxTimeoutSeconds) || requirements.maxTimeoutSeconds <= 0)
    return fail('invalid_requirements', 'maxTimeoutSeconds is not a positive whole number');
  if (!/^0x[0-9a-fA-F]{64}$/.test(nonce)) return fail('invalid_requirements', 'nonce is not 32 bytes of hex');
  const chainId = NETWORK_TABLE[network].chainId;
  if (chainId === undefined) return fail('not_evm_network', `${network} has no chain id`);
  return ok({
    network,
    account,
    chainId,
    token: clients.value.usdc,
    payTo: getAddress(requirements.payTo),
    amount: BigInt(requirements.maxAmountRequired),
    deadline: BigInt(Math.floor(now.getTime() / 1000)) + BigInt(requirements.maxTimeoutSeconds),
    nonce: nonce.toLowerCase() as Hex,
  });
}

/** The EIP-712 domain of every Permit2 signature on a chain. */
export function permit2Domain(chainId: number) {
  return { name: 'Permit2', chainId, verifyingContract: PERMIT2_ADDRESS } as const;
}

/** Our Permit2 witness transfer for a target's requirements: exactly the amount asked, to payTo, from now until now + maxTimeoutSeconds. */
export async function signPermit2Transfer(
  wallet: { clientsOf: ClientsOf; account: PrivateKeyAccount | undefined },
  requirements: PaymentRequirements,
  signing: { now: Date; nonce: Hex },
): Promise<Result<SignedPermit2, SignFailureReason>> {
  const terms = permit2Terms(wallet, requirements, signing);
  if (!terms.ok) return terms;
  const { network, account, chainId, token, payTo, amount, deadline, nonce } = terms.value;
  const authorization: Permit2Authorization = {
    from: account.address,
    permitted: { token, amount: amount.toString() },
    spender: EXACT_PERMIT2_PROXY_ADDRESS,
    nonce: BigInt(nonce).toString(),
    deadline: deadline.toString(),
    // As @x402/evm's client: valid at once (the proxy refuses before validAfter).
    witness: { to: payTo, validAfter: '0' },
  };
  const signature = await account.sign({
    hash: hashTypedData({
      domain: permit2Domain(chainId),
      types: permit2WitnessTypes,
      primaryType: 'PermitWitnessTransferFrom',
      message: {
        permitted: { token, amount },
        spender: authorization.spender,
        nonce: BigInt(nonce),
        deadline,
        witness: { to: payTo, validAfter: 0n },
      },
    }),
  });
  return ok({
    network,
    payment: {
      x402Version: X402_VERSION,
      scheme: 'exact',
      network: requirements.network,
      payload: { signature, permit2Authorization: authorization },
    },
    nonce,
    unusableFrom: deadline + 1n,
  });
}

export interface Permit2Reads {
  /** What our wallet allows Permit2 to move of the network's stablecoin. */
  permit2Allowance(network: NetworkName, owner: string): Promise<Result<bigint, ReadFailureReason>>;
  /** Whether `owner`'s Permit2 nonce (32 bytes of hex) is spent. */
  permit2NonceUsed(network: NetworkName, owner: string, nonce: string): Promise<Result<boolean, ReadFailureReason>>;
}

export function createPermit2Reads(clientsOf: ClientsOf): Permit2Reads {
  return {
    async permit2Allowance(network, owner) {
      const clients = clientsOf(network);
      if (!clients.ok) return clients;
      try {
        return ok(
          await clients.value.publicClient.readContract({
            address: clients.value.usdc,
            abi: erc20ApprovalAbi,
            functionName: 'allowance',
            args: [getAddress(owner), PERMIT2_ADDRESS],
          }),
        );
      } catch (error) {
        return readFailure(error);
      }
    },
    async permit2NonceUsed(network, owner, nonce) {
      const clients = clientsOf(network);
      if (!clients.ok) return clients;
      if (!/^0x[0-9a-fA-F]{64}$/.test(nonce)) return fail('invalid_argument', 'nonce is not 32 bytes of hex');
      const value = BigInt(nonce);
      try {
        // Where Permit2 is not deployed, no permit of ours can have been spent.
        const code = await clients.value.publicClient.getCode({ address: PERMIT2_ADDRESS });
        if (code === undefined || code === '0x') return ok(false);
        const word = await clients.value.publicClient.readContract({
          address: PERMIT2_ADDRESS,
          abi: permit2Abi,
          functionName: 'nonceBitmap',
          args: [getAddress(owner), value >> 8n],
        });
        return ok(((word >> (value & 0xffn)) & 1n) === 1n);
      } catch (error) {
        return readFailure(error);
      }
    },
  };
}
