/**
 * The x402 exact payment as a Solana transaction (pure, no RPC): a v0 transaction whose fee payer
 * is the target's facilitator (extra.feePayer), with SetComputeUnitLimit, SetComputeUnitPrice and
 * one TransferChecked of exactly the amount from our USDC account to the payTo's associated USDC
 * account.
 */
import {
  appendTransactionMessageInstructions,
  createTransactionMessage,
  pipe,
  setTransactionMessageFeePayer,
  setTransactionMessageLifetimeUsingBlockhash,
  type Address,
  type KeyPairSigner,
} from '@solana/kit';
import { getSetComputeUnitLimitInstruction, getSetComputeUnitPriceInstruction } from '@solana-program/compute-budget';
import { findAssociatedTokenPda, getTransferCheckedInstruction, TOKEN_PROGRAM_ADDRESS } from '@solana-program/token';

export const USDC_DECIMALS = 6;
/**
 * A TransferChecked costs about 6,200 compute units on the classic token program, each compute
 * budget instruction 150: a limit with room to spare saves a simulation round trip.
 *
 * Two payments of the same amount to the same payTo under the same blockhash would be byte-identical
 * transactions (ed25519 signatures are deterministic), and the cluster keeps only the first: the
 * second call would fail. A Memo would make them unique, but x402 1.2.0's facilitator refuses any
 * fourth instruction, so the limit and the price are drawn at random within these bounds instead.
 * The priority fee stays at most 5 x 200,000 / 10^6 = 1 lamport; facilitators cap the price at
 * 5,000,000 micro-lamports.
 */
export const COMPUTE_UNIT_LIMIT_RANGE = { min: 20_000, max: 200_000 } as const;
export const COMPUTE_UNIT_PRICE_MICRO_LAMPORTS_RANGE = { min: 1, max: 5 } as const;

/** A recent blockhash and the last block height at which a transaction using it can land. */
export interface BlockhashLifetime {
  blockhash: Parameters<typeof setTransactionMessageLifetimeUsingBlockhash>[0]['blockhash'];
  lastValidBlockHeight: bigint;
}

export async function usdcAccountOf(owner: Address, mint: Address): Promise<Address> {
  const [address] = await findAssociatedTokenPda({ owner, mint, tokenProgram: TOKEN_PROGRAM_ADDRESS });
  return address;
}

/**
 * The exact-scheme transaction message (pure, no RPC): fee payer = the facilitator, then compute
 * unit limit, compute unit price, and one TransferChecked with us as the authority.
 */
export function exactPaymentMessage(input: {
  payer: KeyPairSigner;
  feePayer: Address;
  mint: Address;
  source: Address;
  destination: Address;
  amount: bigint;
  blockhash: BlockhashLifetime;
  computeUnitLimit: number;
  computeUnitPriceMicroLamports: bigint;
}) {
  return pipe(
    createTransactionMessage({ version: 0 }),
    (message) => setTransactionMessageFeePayer(input.feePayer, message),
    (message) => setTransactionMessageLifetimeUsingBlockhash(input.blockhash, message),
    (message) =>
      appendTransactionMessageInstructions(
        [
          getSetComputeUnitLimitInstruction({ units: input.computeUnitLimit }),
          getSetComputeUnitPriceInstruction({ microLamports: input.computeUnitPriceMicroLamports }),
          getTransferCheckedInstruction({
            source: input.source,
            mint: input.mint,
            destination: input.destination,
            authority: input.payer,
            amount: input.amount,
            decimals: USDC_DECIMALS,
          }),
        ],
        message,
      ),
  );
}
