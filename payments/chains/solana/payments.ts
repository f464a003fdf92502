/**
 * The x402 exact payment we send to targets on Solana (docs/architecture.md section 4): checked
 * against the requirements and the chain, built, and signed by us only. The facilitator co-signs
 * and submits.
 */
import { randomInt } from 'node:crypto';
import {
  fetchEncodedAccounts,
  getBase58Decoder,
  getBase64EncodedWireTransaction,
  isAddress,
  partiallySignTransactionMessageWithSigners,
  type Address,
  type KeyPairSigner,
  type Transaction,
} from '@solana/kit';
import { AccountState } from '@solana-program/token';
import { encodePaymentHeader } from '../../x402/headers';
import { X402_VERSION, type ExactSvmPayload, type PaymentPayload, type PaymentRequirements } from '../../x402/types';
import { fail, ok, type Result } from '../../basics/result';
import { canonicalNetwork, NETWORK_TABLE, type NetworkName } from '../../basics/networkTable';
import { readTokenAccount, rpcFailure, type SvmNetworkClients, type SvmRpc } from './rpc';
import {
  COMPUTE_UNIT_LIMIT_RANGE,
  COMPUTE_UNIT_PRICE_MICRO_LAMPORTS_RANGE,
  exactPaymentMessage,
  usdcAccountOf,
  type BlockhashLifetime,
} from './transactions';

const MAX_U64 = (1n << 64n) - 1n;

export type BuildFailureReason =
  | 'not_solana_network'
  | 'network_not_enabled'
  | 'no_wallet'
  | 'asset_mismatch'
  | 'invalid_requirements'
  | 'missing_fee_payer'
  | 'invalid_fee_payer'
  | 'destination_account_missing'
  | 'destination_account_invalid'
  | 'insufficient_funds'
  | 'rpc_timeout'
  | 'rpc_error';

export interface BuiltSolanaPayment {
  network: NetworkName;
  /** X-PAYMENT as an object; `header` is its encoding. */
  payment: PaymentPayload<ExactSvmPayload>;
  header: string;
  payer: Address;
  feePayer: Address;
  source: Address;
  destination: Address;
  amount: bigint;
  /** The transaction cannot land after this block height: a watch may give up past it. */
  lastValidBlockHeight: bigint;
  /** Our signature (base58). The transaction's id is the fee payer's signature, known once the facilitator signs. */
  payerSignature: string;
}

/** A payment the requirements allow us to make: who pays, who receives, how much, through which accounts. */
interface PaymentPlan {
  network: NetworkName;
  clients: SvmNetworkClients;
  signer: KeyPairSigner;
  feePayer: Address;
  payTo: Address;
  amount: bigint;
  source: Address;
  destination: Address;
}

export async function buildExactPayment(
  rpc: SvmRpc,
  signer: KeyPairSigner | undefined,
  requirements: PaymentRequirements,
): Promise<Result<BuiltSolanaPayment, BuildFailureReason>> {
  const plan = await planPayment(rpc, signer, requirements);
  if (!plan.ok) return plan;
  const blockhash = await checkAccountsAndFetchBlockhash(rpc, plan.value);
  if (!blockhash.ok) return blockhash;
  return ok(await signExactPayment(plan.value, requirements, blockhash.value));
}

/** The requirements checked against our configuration (no RPC), and the token accounts they name. */
async function planPayment(
  rpc: SvmRpc,
  signer: KeyPairSigner | undefined,
  requirements: PaymentRequirements,
): Promise<Result<PaymentPlan, BuildFailureReason>> {
  const network = canonicalNetwork(requirements.network);
  if (network === undefined || NETWORK_TABLE[network].chainType !== 'solana') {
    return fail('not_solana_network', `${requirements.network} is not a Solana network`);
  }
  const clients = rpc.clientsOf(network);
  if (!clients.ok) return clients;
  if (signer === undefined) return fail('no_wallet', 'SOLANA_PRIVATE_KEY is not configured');
  const { usdc } = clients.value;
  if (requirements.asset !== usdc)
    return fail('asset_mismatch', `asset ${requirements.asset} is not USDC on ${network}`);
  if (!isAddress(requirements.payTo))
    return fail('invalid_requirements', `payTo ${requirements.payTo} is not a Solana address`);
  if (!/^[1-9][0-9]*$/.test(requirements.maxAmountRequired) || BigInt(requirements.maxAmountRequired) > MAX_U64) {
    return fail('invalid_requirements', 'maxAmountRequired is not a positive 64-bit integer');
  }
  const feePayer = requirements.extra?.feePayer;
  if (feePayer === undefined || feePayer === null || feePayer === '')
    return fail('missing_fee_payer', 'extra.feePayer is missing');
  if (typeof feePayer !== 'string' || !isAddress(feePayer))
    return fail('invalid_fee_payer', 'extra.feePayer is not a Solana address');
  // Our key as fee payer would make us pay the fee and be both payer and authority, which facilitators refuse.
  if (feePayer === signer.address) return fail('invalid_fee_payer', 'extra.feePayer is our own address');

  const amount = BigInt(requirements.maxAmountRequired);
  const payTo = requirements.payTo as Address;
  const source = await usdcAccountOf(signer.address, usdc);
  const destination = await usdcAccountOf(payTo, usdc);
  return ok({ network, clients: clients.value, signer, feePayer, payTo, amount, source, destination });
}

/**
 * The chain's side: the payTo's USDC account exists and can receive, ours holds the amount; then a
 * recent blockhash for the transaction.
 */
async function checkAccountsAndFetchBlockhash(
  rpc: SvmRpc,
  { network, clients: { rpc: client, usdc }, payTo, amount, source, destination }: PaymentPlan,
): Promise<Result<BlockhashLifetime, BuildFailureReason>> {
  try {
    // One read at one slot for both accounts: the balance we check is the one next to the destination we saw.
    const [destinationAccount, sourceAccount] = await fetchEncodedAccounts<[string, string]>(
      client,
      [destination, source],
      {
        ...rpc.bounded(),
        commitment: 'confirmed',
      },
    );
    if (!destinationAccount.exists) {
      return fail(
        'destination_account_missing',
        `the USDC account of ${payTo} on ${network} does not exist; we never pay into a missing account`,
      );
    }
    const destinationToken = readTokenAccount(destinationAccount);
    if (destinationToken === undefined || destinationToken.mint !== usdc || destinationToken.owner !== payTo) {
      return fail('destination_account_invalid', `the account ${destination} is not a USDC account of ${payTo}`);
    }
    if (destinationToken.state !== AccountState.Initialized) {
      return fail('destination_account_invalid', `the USDC account of ${payTo} is frozen or uninitialized`);
    }
    const sourceToken = sourceAccount.exists ? readTokenAccount(sourceAccount) : undefined;
    const balance = sourceToken?.amount ?? 0n;
    if (balance < amount)
      return fail('insufficient_funds', `our USDC balance on ${network} is ${balance}, the payment needs ${amount}`);
    const { value: blockhash } = await client.getLatestBlockhash({ commitment: 'confirmed' }).send(rpc.bounded());
    return ok(blockhash);
  } catch (error) {
    return rpcFailure(error);
  }
}

/** The transaction signed by us (the fee payer's signature left to the facilitator), as X-PAYMENT. */
async function signExactPayment(
  { network, clients: { usdc }, signer, feePayer, amount, source, destination }: PaymentPlan,
  requirements: PaymentRequirements,
  blockhash: BlockhashLifetime,
): Promise<BuiltSolanaPayment> {
  const message = exactPaymentMessage({
    payer: signer,
    feePayer,
    mint: usdc,
    source,
    destination,
    amount,
    blockhash,
    computeUnitLimit: randomInt(COMPUTE_UNIT_LIMIT_RANGE.min, COMPUTE_UNIT_LIMIT_RANGE.max + 1),
    computeUnitPriceMicroLamports: BigInt(
      randomInt(COMPUTE_UNIT_PRICE_MICRO_LAMPORTS_RANGE.min, COMPUTE_UNIT_PRICE_MICRO_LAMPORTS_RANGE.max + 1),
    ),
  });
  const signed: Transaction = await partiallySignTransactionMessageWithSigners(message);
  const ourSignature = signed.signatures[signer.address];
  const payment: PaymentPayload<ExactSvmPayload> = {
    x402Version: X402_VERSION,
    scheme: 'exact',
    network: requirements.network,
    payload: { transaction: getBase64EncodedWireTransaction(signed) },
  };
  return {
    network,
    payment,
    header: encodePaymentHeader(payment),
    payer: signer.address,
    feePayer,
    source,
    destination,
    amount,
    lastValidBlockHeight: blockhash.lastValidBlockHeight,
    payerSignature: ourSignature ? getBase58Decoder().decode(ourSignature) : '',
  };
}
