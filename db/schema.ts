import type { ColumnType, Generated } from 'kysely';

/** Row types of our tables. bigint columns are parsed to bigint (see db/index.ts). */
type Timestamp = ColumnType<Date, Date | string | undefined, Date | string>;

export interface OrganisationsTable {
  id: Generated<bigint>;
  name: string;
  credit_balance: ColumnType<bigint, bigint | undefined, bigint>;
  created_at: Timestamp;
}

export interface AccountsTable {
  id: Generated<bigint>;
  public_id: Generated<string>;
  organisation_id: bigint;
  name: string;
  created_at: Timestamp;
}

export interface ApiKeysTable {
  id: Generated<bigint>;
  account_id: bigint;
  prefix: string;
  key_hash: Buffer;
  daily_cap_credits: bigint;
  /** The key's policy (db/migrations/..._key_policies): null means no such rule. */
  default_max_micro_usdc: ColumnType<bigint | null, bigint | null | undefined, bigint | null>;
  hard_max_micro_usdc: ColumnType<bigint | null, bigint | null | undefined, bigint | null>;
  allowed_hosts: ColumnType<string[] | null, string[] | null | undefined, string[] | null>;
  created_at: Timestamp;
  revoked_at: ColumnType<Date | null, Date | string | null | undefined, Date | string | null>;
}

export type LedgerKind = 'grant' | 'reserve' | 'charge' | 'release' | 'refund' | 'purchase';

export interface CreditLedgerTable {
  id: Generated<bigint>;
  organisation_id: bigint;
  account_id: bigint | null;
  api_key_id: bigint | null;
  kind: LedgerKind;
  amount_credits: bigint;
  reference: string;
  /** A proxy payment's charge: whether the payment it rests on is final on chain (null: no chain payment). */
  finality: ColumnType<Finality | null, Finality | null | undefined, Finality | null>;
  created_at: Timestamp;
}

export type SpendScope = 'relay_wallet' | 'relay_system' | 'proxy_account' | 'proxy_system' | 'api_key';
export type SpendClass = 'mainnet' | 'testnet' | 'all';
/** A network's class (payments/basics/networkTable.ts NetworkClass). */
export type NetworkClassName = 'mainnet' | 'testnet';

export interface DailySpendTable {
  scope: SpendScope;
  scope_id: string;
  network_class: SpendClass;
  /** UTC date, as 'YYYY-MM-DD'. */
  day: ColumnType<string, string, string>;
  /** The counter of relay scopes (relay_wallet, relay_system); zero for the others. */
  spent_micro_usdc: ColumnType<bigint, bigint | undefined, bigint>;
  /** The counter of proxy and API key scopes (proxy_account, proxy_system, api_key); zero for relay scopes. */
  spent_credits: ColumnType<bigint, bigint | undefined, bigint>;
}

export type StoredWebhookStatus =
  | 'async_processing'
  | 'success'
  | 'success_refunded'
  | 'refund_confirmed'
  | 'no_refund_needed'
  | 'payment_failed'
  | 'upstream_error'
  | 'internal_error'
  | 'rate_limited'
  | 'validation_failed'
  | 'refund_failed';

export type WebhookKind = 'proxy_payment' | 'relay_refund' | 'relay_payment' | 'credit_purchase';

export interface WebhooksTable {
  id: Generated<string>;
  kind: WebhookKind;
  status: StoredWebhookStatus;
  tx_hash: string | null;
  network: string | null;
  method: 'facilitator' | 'direct' | null;
  relay_tx_id: bigint | null;
  facilitator_url: string | null;
  message: string | null;
  error: string | null;
  created_at: Timestamp;
  updated_at: Timestamp;
}

export type ProxyPaymentState = 'reserved' | 'signed' | 'charged' | 'released';

/** How a /proxy payment pays its target: batch-settlement is ruled as upto (a maximum held, the used part charged). */
export type ProxyScheme = 'exact' | 'upto' | 'batch-settlement';

export interface ProxyPaymentsTable {
  id: Generated<bigint>;
  reference: string;
  organisation_id: bigint;
  account_id: bigint;
  api_key_id: bigint;
  request_id: string;
  target_url: string;
  network: string;
  chain_type: 'evm' | 'solana';
  pay_to: string;
  amount_micro_usdc: bigint;
  credits: bigint;
  state: ColumnType<ProxyPaymentState, ProxyPaymentState | undefined, ProxyPaymentState>;
  payer: string | null;
  payer_signature: string | null;
  /** EVM: the authorization's validBefore, unix seconds. */
  valid_before: bigint | null;
  /** Solana: the last block height at which the transaction can land. */
  last_valid_block_height: bigint | null;
  tx_hash: string | null;
  webhook_id: string | null;
  /** Our signed payment (the x402 payload), kept to send it again if a reorg drops it. */
  payment_payload: ColumnType<unknown, string | null | undefined, string | null>;
  /** Why the payment ended as it did, for operators. */
  outcome: string | null;
  /** The claim of the idempotency record the /proxy call ran under (payments/basics/idempotency.ts). */
  idempotency_claim: string | null;
  /**
   * exact, or upto: the target settles at most the maximum. For upto, amount_micro_usdc and credits
   * are the maximum and the reservation while the payment is open, and what the target settled and
   * what was charged once charged.
   */
  scheme: ColumnType<ProxyScheme, ProxyScheme | undefined, ProxyScheme>;
  /** upto: the maximum signed, micro-USDC. */
  max_amount_micro_usdc: bigint | null;
  /** upto: the credits held for the maximum plus the fee. */
  reserved_credits: bigint | null;
  /**
   * The network class and UTC day of the daily counters the hold moved: a release gives the
   * credits back on them. Null only on a row settled before the migration ..._reservations_on_payments
   * that had no reservation.
   */
  network_class: 'mainnet' | 'testnet' | null;
  spend_day: ColumnType<string | null, string | null | undefined, string | null>;
  /** The host (and port) of target_url, computed by Postgres (a generated column: never written). */
  target_host: ColumnType<string | null, never, never>;
  created_at: Timestamp;
  signed_at: ColumnType<Date | null, Date | string | null | undefined, Date | string | null>;
  settled_at: ColumnType<Date | null, Date | string | null | undefined, Date | string | null>;
}

/**
 * The daily summary of proxy_payments GET /v1/usage reads, kept by triggers on proxy_payments
 * (the migration ..._usage_daily): never written by the service.
 */
export interface UsageDailyTable {
  organisation_id: bigint;
  day: ColumnType<string, never, never>;
  api_key_id: bigint;
  /** proxy_payments.target_host, '' where it has none. */
  target_host: string;
  charged_payments: bigint;
  charged_credits: bigint;
  charged_amount_micro_usdc: bigint;
  released_payments: bigint;
  released_credits: bigint;
  released_amount_micro_usdc: bigint;
  /**
   * Zero: payments still open (reserved or signed) are read from proxy_payments itself (the
   * migration ..._usage_settled_only); kept for instances of the release before it.
   */
  pending_payments: bigint;
  pending_credits: bigint;
  pending_amount_micro_usdc: bigint;
}

export type RelayTransactionState =
  'received' | 'settling' | 'settled' | 'settle_failed' | 'delivered' | 'refund_pending' | 'refunded' | 'refund_failed';

export type SettlementMethod = 'facilitator' | 'direct';

/** A client's X-PAYMENT to the service in relay mode; `nonce_key` is its replay guard (see the migration). */
export interface RelayTransactionsTable {
  id: Generated<bigint>;
  /** Canonical network name (aliases resolved). */
  network: string;
  chain_type: 'evm' | 'solana';
  asset: string;
  payer: string;
  pay_to: string;
  amount_micro: bigint;
  /** EVM: the authorization nonce (lowercase hex). Solana: the payer's transaction signature (base58). */
  nonce_key: string;
  /** The decoded X-PAYMENT and the requirement of our 402 it matched; written as JSON text, read as objects. */
  payment_payload: ColumnType<unknown, string, string>;
  payment_requirements: ColumnType<unknown, string, string>;
  /** EVM: the authorization's validBefore, unix seconds. */
  valid_before: bigint | null;
  state: ColumnType<RelayTransactionState, RelayTransactionState | undefined, RelayTransactionState>;
  settle_method: SettlementMethod | null;
  client_tx_hash: string | null;
  failure_reason: string | null;
  failure_details: string | null;
  target_url: string | null;
  target_method: string | null;
  target_network: string | null;
  target_amount_micro: bigint | null;
  target_payment_ref: string | null;
  target_tx_hash: string | null;
  /** Our wallet on the target's network, and when our payment to the target stops being usable. */
  target_payer: string | null;
  /** EVM: validBefore of our authorization, unix seconds. */
  target_valid_before: bigint | null;
  /** Solana: the last block height at which our transaction can land. */
  target_last_valid_block_height: bigint | null;
  /** Our signed payment to the target (the x402 payload), kept to send it again if a reorg drops it. */
  target_payment_payload: ColumnType<unknown, string | null | undefined, string | null>;
  /** The HTTP status the target answered our paid call with. */
  target_status: number | null;
  /** exact, or upto (target_amount_micro is then the maximum the target may settle). */
  target_scheme: 'exact' | 'upto' | 'batch-settlement' | null;
  /** upto: what the target settled of the maximum, read from the chain (micro-USDC). */
  target_used_micro: bigint | null;
  /** upto: what the client pays in the end (the used amount plus the fee on it); the rest is refund_micro. */
  charged_micro: bigint | null;
  /** A partial refund: the unused part of the client's payment (null: a refund returns the whole payment). */
  refund_micro: bigint | null;
  /** The call's webhook record, once one was opened (a refund, a payment watched on-chain). */
  webhook_id: string | null;
  /** UTC day the payment was counted against the daily relay limits; null when it was not (or was taken back). */
  spend_day: ColumnType<string | null, string | null | undefined, string | null>;
  /** When the request answered its client while the transaction was still open. */
  responded_at: ColumnType<Date | null, Date | string | null | undefined, Date | string | null>;
  /** Why the transaction ended as it did, for operators. */
  outcome: string | null;
  /** The endpoint that took the payment; only 'relay' rows are finished by the relay's jobs. */
  mode: 'relay' | 'chat' | 'purchase' | null;
  /** The claim of the idempotency record the paying call ran under (payments/basics/idempotency.ts). */
  idempotency_claim: string | null;
  /** EVM direct settlement: the signed transaction of client_tx_hash, stored before its broadcast (sent again if lost). */
  client_raw_tx: string | null;
  /** The scheme the client paid with: `exact` (the amount) or `upto` (a maximum; we settle what was used). */
  scheme: ColumnType<ProxyScheme, ProxyScheme | undefined, ProxyScheme>;
  /** upto: the maximum the client signed, in the asset's atomic units (numeric: read as text, written as bigint). */
  maximum_atomic: ColumnType<string | null, bigint | null | undefined, bigint | null>;
  /** upto: what we settled, in the asset's atomic units; never above maximum_atomic (a check). */
  settled_atomic: ColumnType<string | null, bigint | null | undefined, bigint | null>;
  created_at: Timestamp;
  updated_at: Timestamp;
  settled_at: ColumnType<Date | null, Date | string | null | undefined, Date | string | null>;
  /** When the relay_follow job looks at the row next while it is open (null: not followed that way). */
  look_at: ColumnType<Date | null, Date | string | null | undefined, Date | string | null>;
  /** upto: the class whose exposure counters (upto_exposure) count the maximum while the row is open; null once taken back. */
  upto_exposure_class: ColumnType<
    NetworkClassName | null,
    NetworkClassName | null | undefined,
    NetworkClassName | null
  >;
}

/**
 * The maxima of upto permits admitted on /relay and not yet settled or ended, in micro-USDC: per
 * paying wallet (scope 'wallet', scope_id the payer) and for the service ('total', 'system').
 */
export interface UptoExposureTable {
  scope: 'wallet' | 'total';
  scope_id: string;
  network_class: NetworkClassName;
  open_micro: bigint;
}

/** Payers whose upto charge was lost after the target was paid: never admitted by upto again. */
export interface UptoDefaultedPayersTable {
  payer: string;
  network: string;
  relay_transaction_id: bigint;
  reason: string;
  lost_micro: bigint;
  defaulted_at: Generated<Date>;
}

export type RefundStatus = 'pending' | 'confirmed' | 'failed';

export interface RefundsTable {
  id: Generated<bigint>;
  relay_transaction_id: bigint;
  network: string;
  asset: string;
  recipient: string;
  amount_micro: bigint;
  method: SettlementMethod;
  status: ColumnType<RefundStatus, RefundStatus | undefined, RefundStatus>;
  tx_hash: string | null;
  /** Solana: the blockhash our refund transaction was signed with; it cannot land once that expires. */
  blockhash: string | null;
  /** EVM: the signed transaction of tx_hash, stored before its broadcast (sent again if lost). */
  raw_tx: string | null;
  error: string | null;
  created_at: Timestamp;
  updated_at: Timestamp;
  confirmed_at: ColumnType<Date | null, Date | string | null | undefined, Date | string | null>;
}

/** Settled is not final: a transaction is final at its network's finality rule (payments/tracking/finality.ts). */
export type Finality = 'pending' | 'final' | 'lost';
export type FinalityLeg = 'client_settlement' | 'target_payment' | 'refund';

/** One transaction a payment rests on, watched from settled to final (payments/tracking/finality.ts). */
export interface FinalityWatchesTable {
  id: Generated<bigint>;
  /** relay:<id>:client, relay:<id>:target, proxy:<id> or refund:<id>: one watch per leg. */
  subject: string;
  leg: FinalityLeg;
  network: string;
  relay_transaction_id: bigint | null;
  proxy_payment_id: bigint | null;
  refund_id: bigint | null;
  /** The transaction watched now (a new one after it was sent again). */
  tx_hash: string;
  /** Whose money the transfer moves (an authorization's signer); null for our own refunds. */
  payer: string | null;
  /** What is at risk if the transaction never lands. */
  amount_micro_usdc: bigint;
  /** What the chain family needs to read the transfer and send it again (read as an object). */
  transfer: ColumnType<unknown, string, string>;
  finality: ColumnType<Finality, Finality | undefined, Finality>;
  block_number: bigint | null;
  resends: ColumnType<number, number | undefined, number>;
  details: string | null;
  created_at: Timestamp;
  updated_at: Timestamp;
  final_at: ColumnType<Date | null, Date | string | null | undefined, Date | string | null>;
  /** When a pending watch is looked at next (the finality_follow job takes the watches due). */
  look_at: Timestamp;
}

export type IdempotencyState = 'running' | 'finished';

/** A paid call's answer kept for the retries of its Idempotency-Key or payment (payments/basics/idempotency.ts). */
export interface IdempotencyRecordsTable {
  scope: string;
  key: string;
  fingerprint: string;
  /** /relay with an Idempotency-Key: the SHA-256 of the first call's payment payload. */
  payment: string | null;
  state: IdempotencyState;
  status: number | null;
  content_type: string | null;
  headers: ColumnType<Record<string, string | string[]> | null, string | null, string | null>;
  body: Buffer | null;
  created_at: Timestamp;
  finished_at: ColumnType<Date | null, Date | string | null | undefined, Date | string | null>;
  expires_at: Timestamp;
  /** This claim of the key (a new one at each claim); the money records of the call carry it. */
  claim: string | null;
  /** The instance running the call (its id at start), which renews the lease while it lives. */
  owner: string | null;
  lease_expires_at: ColumnType<Date | null, Date | string | null | undefined, Date | string | null>;
}

export type CreditPurchaseState = 'settling' | 'credited' | 'failed';

/** Credits bought over x402 (db/migrations/..._credit_purchases): one row per payment. */
export interface CreditPurchasesTable {
  id: Generated<bigint>;
  /** SHA-256 (hex) of the payment's payload: a repeat of the same payment finds its purchase. */
  payment_id: string;
  relay_transaction_id: bigint;
  organisation_id: bigint;
  api_key_id: bigint;
  credits: bigint;
  state: ColumnType<CreditPurchaseState, CreditPurchaseState | undefined, CreditPurchaseState>;
  webhook_id: string;
  /** The organisation's balance right after the credits were added. */
  balance_after: bigint | null;
  failure: string | null;
  created_at: Timestamp;
  finished_at: ColumnType<Date | null, Date | string | null | undefined, Date | string | null>;
}

/** A paid call to a target, for discovery (db/migrations/..._paid_resource_calls). */
export interface PaidResourceCallsTable {
  id: Generated<bigint>;
  /** Origin and path only. */
  resource: string;
  method: string;
  network: string;
  /** The offer we paid, its resource reduced to origin and path; written as JSON text. */
  offer: ColumnType<unknown, string, string>;
  succeeded: boolean;
  latency_ms: number;
  created_at: Timestamp;
}

export interface SpendingApprovalsTable {
  network: string;
  token: string;
  owner: string;
  spender: string;
  tx_hash: string | null;
  /** numeric: read as text, written as bigint. */
  gas_used: ColumnType<string | null, bigint | null, bigint | null>;
  gas_fee_wei: ColumnType<string | null, bigint | null, bigint | null>;
  created_at: Timestamp;
  confirmed_at: ColumnType<Date | null, Date | null, Date | null>;
}

/** numeric(78, 0) token amounts: read as text, written as bigint or text. */
type Atomic = ColumnType<string, bigint | string | undefined, bigint | string>;

/** A channel a client pays us through (db/migrations/..._receiver_channels). */
export interface ReceiverChannelsTable {
  channel_id: string;
  network: string;
  payer: string;
  payer_authorizer: string;
  receiver: string;
  token: string;
  withdraw_delay: number;
  config: ColumnType<unknown, string, string>;
  charged_cumulative: Atomic;
  signed_max_claimable: Atomic;
  signature: string | null;
  balance: Atomic;
  total_claimed: Atomic;
  withdraw_requested_at: ColumnType<bigint, bigint | undefined, bigint>;
  refund_nonce: ColumnType<bigint, bigint | undefined, bigint>;
  onchain_synced_at: ColumnType<Date | null, Date | null | undefined, Date | null>;
  pending_id: string | null;
  pending_until: ColumnType<Date | null, Date | null | undefined, Date | null>;
  last_request_at: ColumnType<Date | null, Date | null | undefined, Date | null>;
  claim_due_at: ColumnType<Date | null, Date | null | undefined, Date | null>;
  created_at: Timestamp;
  updated_at: Timestamp;
}

export interface ReceiverChannelChargesTable {
  id: Generated<bigint>;
  channel_id: string;
  cumulative: Atomic;
  amount: Atomic;
  signed_max_claimable: Atomic;
  target_url: string | null;
  created_at: Timestamp;
}

export type ReceiverTransactionState = 'sent' | 'confirmed' | 'failed';

export interface ReceiverChannelClaimsTable {
  id: Generated<bigint>;
  network: string;
  kind: 'claim' | 'settle' | 'refund';
  tx_hash: string | null;
  channels: ColumnType<number, number | undefined, number>;
  amount: Atomic;
  state: ColumnType<ReceiverTransactionState, ReceiverTransactionState | undefined, ReceiverTransactionState>;
  details: string | null;
  created_at: Timestamp;
}

/** Numeric(78,0) amounts in a token's atomic units: read as decimal strings, written as bigint or string. */
type PayerAtomic = ColumnType<string, bigint | string | undefined, bigint | string>;

/** Our channels as a payer of batch-settlement targets (db/migrations/..._payer_channels). */
export interface PayerChannelsTable {
  channel_id: string;
  network: string;
  token: string;
  payer: string;
  payer_authorizer: string;
  receiver: string;
  receiver_authorizer: string;
  withdraw_delay: number;
  salt: string;
  deposited_atomic: PayerAtomic;
  charged_atomic: PayerAtomic;
  signed_max_atomic: PayerAtomic;
  balance_atomic: PayerAtomic;
  total_claimed_atomic: PayerAtomic;
  state: ColumnType<
    'open' | 'closing' | 'closed',
    'open' | 'closing' | 'closed' | undefined,
    'open' | 'closing' | 'closed'
  >;
  last_used_at: ColumnType<Date, Date | undefined, Date>;
  synced_at: Date | null;
  created_at: Generated<Date>;
  /** Giving an idle channel back (db/migrations/..._payer_channel_idle, payments/outgoing/channelIdle.ts). */
  refund_requested_at: ColumnType<Date | null, Date | null | undefined, Date | null>;
  refund_url: ColumnType<string | null, string | null | undefined, string | null>;
  refund_tx_hash: ColumnType<string | null, string | null | undefined, string | null>;
  withdraw_amount_atomic: ColumnType<string | null, bigint | string | null | undefined, bigint | string | null>;
  withdraw_tx_hash: ColumnType<string | null, string | null | undefined, string | null>;
  withdraw_tx_state: ColumnType<PayerTxState | null, PayerTxState | null | undefined, PayerTxState | null>;
  /** Unix seconds by the chain's clock. */
  withdraw_finalize_after: ColumnType<bigint | null, bigint | null | undefined, bigint | null>;
  finalize_tx_hash: ColumnType<string | null, string | null | undefined, string | null>;
  finalize_tx_state: ColumnType<PayerTxState | null, PayerTxState | null | undefined, PayerTxState | null>;
  closing_details: ColumnType<string | null, string | null | undefined, string | null>;
  closed_at: ColumnType<Date | null, Date | null | undefined, Date | null>;
}

/** One of our own transactions on a payer channel: hash stored before broadcast, then its receipt. */
export type PayerTxState = 'sent' | 'confirmed' | 'reverted';

export type PayerVoucherState = 'sent' | 'charged' | 'not_charged' | 'unknown';

/** Every voucher we signed on a payer channel, written before it was sent. */
export interface PayerVouchersTable {
  id: Generated<bigint>;
  channel_id: string;
  call_reference: string | null;
  base_atomic: PayerAtomic;
  ceiling_atomic: PayerAtomic;
  deposit_atomic: ColumnType<string | null, bigint | string | null | undefined, bigint | string | null>;
  signature: string;
  state: ColumnType<PayerVoucherState, PayerVoucherState | undefined, PayerVoucherState>;
  charged_atomic: ColumnType<string | null, bigint | string | null | undefined, bigint | string | null>;
  deposit_tx_hash: string | null;
  details: string | null;
  created_at: Generated<Date>;
  resolved_at: Date | null;
}

export interface Database {
  payer_channels: PayerChannelsTable;
  payer_vouchers: PayerVouchersTable;
  receiver_channels: ReceiverChannelsTable;
  receiver_channel_charges: ReceiverChannelChargesTable;
  receiver_channel_claims: ReceiverChannelClaimsTable;
  spending_approvals: SpendingApprovalsTable;
  paid_resource_calls: PaidResourceCallsTable;
  credit_purchases: CreditPurchasesTable;
  proxy_payments: ProxyPaymentsTable;
  usage_daily: UsageDailyTable;
  organisations: OrganisationsTable;
  accounts: AccountsTable;
  api_keys: ApiKeysTable;
  credit_ledger: CreditLedgerTable;
  daily_spend: DailySpendTable;
  webhooks: WebhooksTable;
  finality_watches: FinalityWatchesTable;
  relay_transactions: RelayTransactionsTable;
  upto_exposure: UptoExposureTable;
  upto_defaulted_payers: UptoDefaultedPayersTable;
  refunds: RefundsTable;
  idempotency_records: IdempotencyRecordsTable;
}
