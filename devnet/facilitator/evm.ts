// Verification and settlement of EVM exact payments (EIP-3009 transferWithAuthorization) against
// the local chains. Written here rather than taken from x402/facilitator because that one does not
// know skale-base, reads public RPCs, and checks less: it accepts any value at or above the price,
// does not look at authorizationState and does not simulate.
import {
  createWalletClient,
  getAddress,
  isAddress,
  isHex,
  parseSignature,
  verifyTypedData,
  type Address,
  type Hex,
  type LocalAccount,
} from 'viem';
import { localTransport, type LocalEvmChain } from '../evm/chain.js';
import { transferWithAuthorizationTypes, type TransferAuthorization } from '../../payments/chains/evm';
import { RECEIPT_TIMEOUT_MS, usdcAbi } from '../evm/usdc.js';
import type { KeyedQueue } from '../key-queue.js';
import { checkVersionSchemeAndNetwork, InvalidPayment } from './invalid.js';
import { EVM_NETWORKS, type EvmNetworkName } from '../networks.js';
import {
  type ExactEvmPayload,
  type PaymentPayload,
  type PaymentRequirements,
  type SettleResponse,
  type VerifyResponse,
} from '../x402.js';

/** An authorization must stay valid this long after verification, so that settlement can land. */
export const VALID_BEFORE_MARGIN_SECONDS = 6n;

interface CheckedAuthorization extends TransferAuthorization {
  chain: LocalEvmChain;
  usdc: Address;
  signature: Hex;
}

export interface EvmFacilitator {
  verify(payment: PaymentPayload, requirements: PaymentRequirements): Promise<VerifyResponse>;
  settle(payment: PaymentPayload, requirements: PaymentRequirements): Promise<SettleResponse>;
}

export function createEvmFacilitator(
  chains: ReadonlyMap<EvmNetworkName, LocalEvmChain>,
  account: LocalAccount,
  queue: KeyedQueue,
): EvmFacilitator {
  const context: EvmContext = { chains, account, queue };
  return {
    verify: (payment, requirements) => verify(context, payment, requirements),
    settle: (payment, requirements) => settle(context, payment, requirements),
  };
}

interface EvmContext {
  chains: ReadonlyMap<EvmNetworkName, LocalEvmChain>;
  account: LocalAccount;
  queue: KeyedQueue;
}

/** Checks the authorization and asks the chain, without sending anything. */
async function verify(
  context: EvmContext,
  payment: PaymentPayload,
  requirements: PaymentRequirements,
): Promise<VerifyResponse> {
  const payer = payerOf(payment);
  try {
    await checkOnChain(context, checkStatically(context, payment, requirements));
    return { isValid: true, payer };
  } catch (error) {
    if (error instanceof InvalidPayment) return { isValid: false, invalidReason: error.reason, payer };
    throw error;
  }
}

/** Checks the authorization again in the queue, sends transferWithAuthorization and waits for its receipt. */
async function settle(
  context: EvmContext,
  payment: PaymentPayload,
  requirements: PaymentRequirements,
): Promise<SettleResponse> {
  const payer = payerOf(payment);
  const failure = (errorReason: string, transaction = ''): SettleResponse => ({
    success: false,
    errorReason,
    transaction,
    network: payment.network,
    payer,
  });
  let checked: CheckedAuthorization;
  try {
    checked = checkStatically(context, payment, requirements);
  } catch (error) {
    if (error instanceof InvalidPayment) return failure(error.reason);
    throw error;
  }
  const { chain } = checked;
  const { account, queue } = context;
  // Verification runs again inside the queue: a second settlement of the same authorization then
  // sees the first one's effect on chain and is refused before anything is sent.
  return queue.run(`${chain.network}:${account.address}`, async () => {
    try {
      await checkOnChain(context, checked);
    } catch (error) {
      if (error instanceof InvalidPayment) return failure(error.reason);
      throw error;
    }
    const wallet = createWalletClient({ account, chain: chain.chain, transport: localTransport(chain.rpcUrl) });
    const hash = await wallet.writeContract(transferCall(checked));
    let status: 'success' | 'reverted';
    try {
      ({ status } = await chain.publicClient.waitForTransactionReceipt({
        hash,
        timeout: RECEIPT_TIMEOUT_MS,
        pollingInterval: 20,
      }));
    } catch {
      return failure('settle_receipt_timeout', hash);
    }
    if (status !== 'success') return failure('invalid_transaction_state', hash);
    return { success: true, transaction: hash, network: payment.network, payer };
  });
}

function checkStatically(
  { chains }: EvmContext,
  payment: PaymentPayload,
  requirements: PaymentRequirements,
): CheckedAuthorization {
  checkVersionSchemeAndNetwork(payment, requirements);
  const chain = chains.get(requirements.network as EvmNetworkName);
  if (!chain) throw new InvalidPayment('invalid_network');
  const usdc = getAddress(EVM_NETWORKS[chain.network].usdc);
  if (!isAddress(requirements.asset) || getAddress(requirements.asset) !== usdc)
    throw new InvalidPayment('invalid_payment_requirements');
  if (!isAddress(requirements.payTo)) throw new InvalidPayment('invalid_payment_requirements');

  // The payload is the client's, unchecked until here: it may be missing or of another scheme.
  const { signature, authorization } = (payment.payload as Partial<ExactEvmPayload> | undefined) ?? {};
  if (!authorization || !isHex(signature) || !isAddress(authorization.from) || !isAddress(authorization.to)) {
    throw new InvalidPayment('invalid_payload');
  }
  if (!isHex(authorization.nonce) || authorization.nonce.length !== 66) throw new InvalidPayment('invalid_payload');
  const amount = (field: unknown): bigint => {
    if (typeof field !== 'string' || !/^\d+$/.test(field)) throw new InvalidPayment('invalid_payload');
    return BigInt(field);
  };
  const value = amount(authorization.value);
  const validAfter = amount(authorization.validAfter);
  const validBefore = amount(authorization.validBefore);
  const checked: CheckedAuthorization = {
    chain,
    usdc,
    from: getAddress(authorization.from),
    to: getAddress(authorization.to),
    value,
    validAfter,
    validBefore,
    nonce: authorization.nonce,
    signature,
  };

  if (checked.to !== getAddress(requirements.payTo))
    throw new InvalidPayment('invalid_exact_evm_payload_recipient_mismatch');
  if (checked.value !== BigInt(requirements.maxAmountRequired))
    throw new InvalidPayment('invalid_exact_evm_payload_authorization_value');
  const nowSeconds = BigInt(Math.floor(Date.now() / 1000));
  // The token requires block.timestamp > validAfter and block.timestamp < validBefore.
  if (checked.validAfter >= nowSeconds) throw new InvalidPayment('invalid_exact_evm_payload_authorization_valid_after');
  if (checked.validBefore < nowSeconds + VALID_BEFORE_MARGIN_SECONDS) {
    throw new InvalidPayment('invalid_exact_evm_payload_authorization_valid_before');
  }
  return checked;
}

async function checkOnChain({ account }: EvmContext, checked: CheckedAuthorization): Promise<void> {
  const { chain, usdc } = checked;
  const { eip712, chainId } = EVM_NETWORKS[chain.network];
  const signatureIsValid =
    checked.signature.length === 132 &&
    (await verifyTypedData({
      address: checked.from,
      domain: { name: eip712.name, version: eip712.version, chainId, verifyingContract: usdc },
      types: transferWithAuthorizationTypes,
      primaryType: 'TransferWithAuthorization',
      message: checked,
      signature: checked.signature,
    }));
  if (!signatureIsValid) throw new InvalidPayment('invalid_exact_evm_payload_signature');

  const [used, balance] = await Promise.all([
    chain.publicClient.readContract({
      address: usdc,
      abi: usdcAbi,
      functionName: 'authorizationState',
      args: [checked.from, checked.nonce],
    }),
    chain.publicClient.readContract({ address: usdc, abi: usdcAbi, functionName: 'balanceOf', args: [checked.from] }),
  ]);
  if (used) throw new InvalidPayment('nonce_already_used');
  if (balance < checked.value) throw new InvalidPayment('insufficient_funds');

  try {
    await chain.publicClient.simulateContract({ account, ...transferCall(checked) });
  } catch {
    throw new InvalidPayment('invalid_exact_evm_payload_simulation_failed');
  }
}

function transferCall(checked: CheckedAuthorization) {
  const { r, s, v, yParity } = parseSignature(checked.signature);
  return {
    address: checked.usdc,
    abi: usdcAbi,
    functionName: 'transferWithAuthorization',
    args: [
      checked.from,
      checked.to,
      checked.value,
      checked.validAfter,
      checked.validBefore,
      checked.nonce,
      Number(v ?? BigInt(27 + yParity)),
      r,
      s,
    ],
  } as const;
}

function payerOf(payment: PaymentPayload): string | undefined {
  const from = (payment.payload as Partial<ExactEvmPayload> | undefined)?.authorization?.from;
  return typeof from === 'string' ? from : undefined;
}
