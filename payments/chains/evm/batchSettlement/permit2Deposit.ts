/**
 * A channel deposit through the Permit2 deposit collector (x402 batch-settlement on networks whose
 * stablecoin moves by Permit2, `extra.assetTransferMethod: "permit2"`): the payer signs a Permit2
 * PermitWitnessTransferFrom whose spender is the collector and whose witness is the channel id; the
 * collector pulls the amount through Permit2 (the payer's standing approval of Permit2 on the
 * token) into the channel. The payload is written as @x402/evm 2.27's client writes it
 * (createBatchSettlementPermit2DepositPayload, which the package does not export), and the
 * collector's data as its facilitator encodes it (buildPermit2CollectorData).
 */
import { encodeAbiParameters, getAddress, parseErc6492Signature, type Address, type Hex } from 'viem';
import type { PrivateKeyAccount } from 'viem/accounts';
import { randomBytes } from 'node:crypto';
import { PERMIT2_ADDRESS } from '../permit2';
import { PERMIT2_DEPOSIT_COLLECTOR_ADDRESS } from './voucher';

/** @x402/evm's batchPermit2WitnessTypes: the witness is the channel the tokens go into. */
export const batchPermit2WitnessTypes = {
  PermitWitnessTransferFrom: [
    { name: 'permitted', type: 'TokenPermissions' },
    { name: 'spender', type: 'address' },
    { name: 'nonce', type: 'uint256' },
    { name: 'deadline', type: 'uint256' },
    { name: 'witness', type: 'DepositWitness' },
  ],
  TokenPermissions: [
    { name: 'token', type: 'address' },
    { name: 'amount', type: 'uint256' },
  ],
  DepositWitness: [{ name: 'channelId', type: 'bytes32' }],
} as const;

/** `payload.deposit.authorization.permit2Authorization` as the client writes it (decimal strings). */
export interface Permit2DepositAuthorization {
  from: Address;
  permitted: { token: Address; amount: string };
  spender: Address;
  nonce: string;
  deadline: string;
  witness: { channelId: Hex };
  signature: Hex;
}

/** A Permit2 deposit as the receiving side reads it (payload.deposit). */
export interface Permit2Deposit {
  amount: bigint;
  from: Address;
  token: Address;
  spender: Address;
  nonce: bigint;
  deadline: bigint;
  channelId: Hex;
  signature: Hex;
}

/**
 * Our wallet's Permit2 authorization of `amount` of `token` into channel `channelId`, valid for
 * `validSeconds` from `nowSeconds`, with a random 256-bit Permit2 nonce (as @x402/evm's
 * createPermit2Nonce).
 */
export async function signPermit2Deposit(
  account: PrivateKeyAccount,
  chainId: number,
  {
    token,
    amount,
    channelId,
    nowSeconds,
    validSeconds,
  }: { token: Address; amount: bigint; channelId: Hex; nowSeconds: number; validSeconds: number },
): Promise<Permit2DepositAuthorization> {
  const nonce = BigInt(`0x${randomBytes(32).toString('hex')}`);
  const deadline = BigInt(Math.floor(nowSeconds + validSeconds));
  const spender = getAddress(PERMIT2_DEPOSIT_COLLECTOR_ADDRESS);
  const permitted = { token: getAddress(token), amount };
  const signature = await account.signTypedData({
    domain: { name: 'Permit2', chainId, verifyingContract: PERMIT2_ADDRESS },
    types: batchPermit2WitnessTypes,
    primaryType: 'PermitWitnessTransferFrom',
    message: { permitted, spender, nonce, deadline, witness: { channelId } },
  });
  return {
    from: account.address,
    permitted: { token: permitted.token, amount: amount.toString() },
    spender,
    nonce: nonce.toString(),
    deadline: deadline.toString(),
    witness: { channelId },
    signature,
  };
}

/** The Permit2 collector's data: nonce, deadline, the signature and no EIP-2612 permit (as @x402/evm's buildPermit2CollectorData). */
export function permit2CollectorData(deposit: Pick<Permit2Deposit, 'nonce' | 'deadline' | 'signature'>): Hex {
  const { signature } = parseErc6492Signature(deposit.signature);
  return encodeAbiParameters(
    [{ type: 'uint256' }, { type: 'uint256' }, { type: 'bytes' }, { type: 'bytes' }],
    [deposit.nonce, deposit.deadline, signature, '0x'],
  );
}
