// A Solana payer for x402 exact payments: builds the transaction that docs/architecture.md section 4
// describes (SetComputeUnitLimit, SetComputeUnitPrice, TransferChecked of exactly the amount from
// the payer's USDC account to the payTo's associated USDC account, fee payer = extra.feePayer),
// signs only its own part, and encodes X-PAYMENT. The payer needs no SOL. v0 by default; legacy
// (as HTTPayer's Python SDK builds it) and a trailing Memo (as x402's @x402/svm client adds it) on
// request, so that both kinds of standard client can be played.
import {
  AccountRole,
  appendTransactionMessageInstructions,
  compressTransactionMessageUsingAddressLookupTables,
  createSolanaRpc,
  createTransactionMessage,
  getBase64EncodedWireTransaction,
  partiallySignTransactionMessageWithSigners,
  pipe,
  setTransactionMessageFeePayer,
  setTransactionMessageLifetimeUsingBlockhash,
  type Address,
  type AddressesByLookupTableAddress,
  type Instruction,
  type KeyPairSigner,
} from '@solana/kit';
import { getSetComputeUnitLimitInstruction, getSetComputeUnitPriceInstruction } from '@solana-program/compute-budget';
import { findAssociatedTokenPda, getTransferCheckedInstruction, TOKEN_PROGRAM_ADDRESS } from '@solana-program/token';
import { MEMO_PROGRAM_ADDRESS } from '../../payments/chains/solana/shape';
import { USDC_DECIMALS, isSolanaNetwork, type SolanaNetworkName } from '../networks.js';
import {
  encodePaymentHeader,
  X402_VERSION,
  type ExactSvmPayload,
  type PaymentPayload,
  type PaymentRequiredBody,
  type PaymentRequirements,
} from '../x402.js';

/** TransferChecked uses about 6,200 compute units; the compute budget instructions 150 each. */
export const DEFAULT_COMPUTE_UNIT_LIMIT = 20_000;
export const DEFAULT_COMPUTE_UNIT_PRICE_MICRO_LAMPORTS = 1n;

export interface SolanaPaymentOverrides {
  amount?: bigint;
  destination?: Address;
  decimals?: number;
  feePayer?: Address;
  computeUnitLimit?: number;
  computeUnitPriceMicroLamports?: bigint;
  /** The message version; 0 unless told. */
  version?: 'legacy' | 0;
  /** A Memo with this text after the TransferChecked, with no accounts, as x402's client adds it. */
  memo?: string;
  /** Moves the accounts these tables hold out of the message (v0 only), as a client using lookup tables would. */
  addressLookupTables?: AddressesByLookupTableAddress;
  /** Replaces the standard instructions (to build transactions of the wrong shape). */
  instructions?: (standard: Instruction[]) => Instruction[];
  network?: string;
}

/** A Memo instruction; `signers` are the accounts the Memo program requires to sign. */
export function memoInstruction(
  text: string,
  {
    programAddress = MEMO_PROGRAM_ADDRESS,
    signers = [],
  }: { programAddress?: Address; signers?: readonly Address[] } = {},
): Instruction {
  return {
    programAddress,
    accounts: signers.map((address) => ({ address, role: AccountRole.READONLY_SIGNER })),
    data: new TextEncoder().encode(text),
  };
}

export interface SignedSolanaPayment {
  payment: PaymentPayload<ExactSvmPayload>;
  header: string;
}

export async function createSolanaPayment(
  payer: KeyPairSigner,
  requirements: PaymentRequirements,
  rpcUrl: string,
  overrides: SolanaPaymentOverrides = {},
): Promise<SignedSolanaPayment> {
  const mint = requirements.asset as Address;
  const feePayer = overrides.feePayer ?? (requirements.extra?.feePayer as Address | undefined);
  if (!feePayer) throw new Error('the payment requirements name no extra.feePayer');
  const [[source], [payToAccount]] = await Promise.all([
    findAssociatedTokenPda({ mint, owner: payer.address, tokenProgram: TOKEN_PROGRAM_ADDRESS }),
    findAssociatedTokenPda({ mint, owner: requirements.payTo as Address, tokenProgram: TOKEN_PROGRAM_ADDRESS }),
  ]);
  const standard: Instruction[] = [
    getSetComputeUnitLimitInstruction({ units: overrides.computeUnitLimit ?? DEFAULT_COMPUTE_UNIT_LIMIT }),
    getSetComputeUnitPriceInstruction({
      microLamports: overrides.computeUnitPriceMicroLamports ?? DEFAULT_COMPUTE_UNIT_PRICE_MICRO_LAMPORTS,
    }),
    getTransferCheckedInstruction({
      source,
      mint,
      destination: overrides.destination ?? payToAccount,
      authority: payer,
      amount: overrides.amount ?? BigInt(requirements.maxAmountRequired),
      decimals: overrides.decimals ?? USDC_DECIMALS,
    }),
    ...(overrides.memo === undefined ? [] : [memoInstruction(overrides.memo)]),
  ];
  const { value: latestBlockhash } = await createSolanaRpc(rpcUrl).getLatestBlockhash().send();
  const built = pipe(
    createTransactionMessage({ version: overrides.version ?? 0 }),
    (draft) => setTransactionMessageFeePayer(feePayer, draft),
    (draft) => setTransactionMessageLifetimeUsingBlockhash(latestBlockhash, draft),
    (draft) => appendTransactionMessageInstructions(overrides.instructions?.(standard) ?? standard, draft),
  );
  const message =
    overrides.addressLookupTables && built.version === 0
      ? (compressTransactionMessageUsingAddressLookupTables(
          built as typeof built & { version: 0 },
          overrides.addressLookupTables,
        ) as typeof built)
      : built;
  const transaction = await partiallySignTransactionMessageWithSigners(message);
  const payment: PaymentPayload<ExactSvmPayload> = {
    x402Version: X402_VERSION,
    scheme: 'exact',
    network: overrides.network ?? requirements.network,
    payload: { transaction: getBase64EncodedWireTransaction(transaction) },
  };
  return { payment, header: encodePaymentHeader(payment) };
}

export interface SolanaFetchOptions {
  rpcUrls: Partial<Record<SolanaNetworkName, string>>;
  /** Refuse to pay more than this (micro-USDC) for one request, as x402-fetch does. */
  maxAmountMicroUsdc: bigint;
}

/**
 * Like x402-fetch's wrapFetchWithPayment, for Solana: on a 402, pays the first exact requirement
 * on a Solana cluster we have an RPC for, and retries once with X-PAYMENT.
 */
export function wrapFetchWithSolanaPayment(
  fetchFunction: typeof fetch,
  payer: KeyPairSigner,
  options: SolanaFetchOptions,
): typeof fetch {
  return async (input, init) => {
    const response = await fetchFunction(input, init);
    if (response.status !== 402) return response;
    const body = (await response.json()) as Partial<PaymentRequiredBody>;
    const requirements = body.accepts?.find(
      (candidate) =>
        candidate.scheme === 'exact' && isSolanaNetwork(candidate.network) && options.rpcUrls[candidate.network],
    );
    if (!requirements) throw new Error('the 402 offers no Solana exact payment this client can make');
    if (BigInt(requirements.maxAmountRequired) > options.maxAmountMicroUsdc)
      throw new Error('Payment amount exceeds maximum allowed');
    const rpcUrl = options.rpcUrls[requirements.network as SolanaNetworkName];
    if (!rpcUrl) throw new Error(`no RPC URL for ${requirements.network}`);
    const { header } = await createSolanaPayment(payer, requirements, rpcUrl);
    const headers = new Headers(init?.headers);
    headers.set('X-PAYMENT', header);
    return fetchFunction(input, { ...init, headers });
  };
}
