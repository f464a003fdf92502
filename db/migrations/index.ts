import type { Migration, MigrationProvider } from 'kysely';
import * as foundation from './2026_11_21_0001_foundation';
import * as creditReservations from './2026_11_21_0002_credit_reservations';
import * as relayTransactions from './2026_11_21_0004_relay_transactions';
import * as proxyPayments from './2026_11_21_0005_proxy_payments';
import * as relayDelivery from './2026_11_21_0006_relay_delivery';
import * as apiKeyNotify from './2026_11_21_0007_api_key_notify';
import * as reserveFunction from './2026_11_21_0008_reserve_function';
import * as spendUnits from './2026_11_21_0009_spend_units';
import * as idempotencyRecords from './2026_11_22_0010_idempotency_records';
import * as idempotencyLeases from './2026_11_25_0011_idempotency_leases';
import * as signedTransactions from './2026_11_25_0012_signed_transactions';
import * as keyPolicies from './2026_11_28_0013_key_policies';
import * as creditPurchases from './2026_11_28_0014_credit_purchases';
import * as paidResourceCalls from './2026_11_28_0015_paid_resource_calls';
import * as usageReads from './2026_11_28_0016_usage_reads';
import * as usageDaily from './2026_11_28_0017_usage_daily';
import * as finalityWatches from './2026_11_29_0017_finality_watches';
import * as spendingApprovals from './2026_11_29_0018_spending_approvals';
import * as uptoPayments from './2026_11_30_0020_upto_payments';
import * as uptoClientPayments from './2026_11_30_0021_upto_client_payments';
import * as finalityFollow from './2026_11_30_0024_finality_follow';
import * as usageDailyDirect from './2026_11_30_0024_usage_daily_direct';
import * as relayFollow from './2026_11_30_0026_relay_follow';
import * as finalityUptoAmounts from './2026_11_30_0027_finality_upto_amounts';
import * as usageDailyRows from './2026_12_01_0028_usage_daily_rows';
import * as columnDomains from './2026_12_01_0029_column_domains';
import * as relayFinalityWhen from './2026_12_01_0030_relay_finality_when';
import * as unreadIndexes from './2026_12_01_0031_unread_indexes';
import * as usageSettledOnly from './2026_12_01_0032_usage_settled_only';
import * as reservationsOnPayments from './2026_12_01_0033_reservations_on_payments';
import * as paidCallKeyChecks from './2026_12_01_0034_paid_call_key_checks';
import * as uptoExposure from './2026_12_01_0035_upto_exposure';
import * as finalityFollowFirst from './2026_12_01_0036_finality_follow_first';
import * as receiverChannels from './2026_12_02_0037_receiver_channels';
import * as payerChannels from './2026_12_02_0039_payer_channels';
import * as walletFloats from './2026_12_02_0040_wallet_floats';
import * as payerChannelIdle from './2026_12_02_0041_payer_channel_idle';

/** Every migration, listed by name in the order it runs. Migrations are frozen once released. */
const MIGRATIONS: Record<string, Migration> = {
  '2026_11_21_0001_foundation': foundation,
  '2026_11_21_0002_credit_reservations': creditReservations,
  '2026_11_21_0004_relay_transactions': relayTransactions,
  '2026_11_21_0005_proxy_payments': proxyPayments,
  '2026_11_21_0006_relay_delivery': relayDelivery,
  '2026_11_21_0007_api_key_notify': apiKeyNotify,
  '2026_11_21_0008_reserve_function': reserveFunction,
  '2026_11_21_0009_spend_units': spendUnits,
  '2026_11_22_0010_idempotency_records': idempotencyRecords,
  '2026_11_25_0011_idempotency_leases': idempotencyLeases,
  '2026_11_25_0012_signed_transactions': signedTransactions,
  '2026_11_28_0013_key_policies': keyPolicies,
  '2026_11_28_0014_credit_purchases': creditPurchases,
  '2026_11_28_0015_paid_resource_calls': paidResourceCalls,
  '2026_11_28_0016_usage_reads': usageReads,
  '2026_11_28_0017_usage_daily': usageDaily,
  '2026_11_29_0017_finality_watches': finalityWatches,
  '2026_11_29_0018_spending_approvals': spendingApprovals,
  '2026_11_30_0020_upto_payments': uptoPayments,
  '2026_11_30_0021_upto_client_payments': uptoClientPayments,
  '2026_11_30_0024_finality_follow': finalityFollow,
  '2026_11_30_0024_usage_daily_direct': usageDailyDirect,
  '2026_11_30_0026_relay_follow': relayFollow,
  '2026_11_30_0027_finality_upto_amounts': finalityUptoAmounts,
  '2026_12_01_0028_usage_daily_rows': usageDailyRows,
  '2026_12_01_0029_column_domains': columnDomains,
  '2026_12_01_0030_relay_finality_when': relayFinalityWhen,
  '2026_12_01_0031_unread_indexes': unreadIndexes,
  '2026_12_01_0032_usage_settled_only': usageSettledOnly,
  '2026_12_01_0033_reservations_on_payments': reservationsOnPayments,
  '2026_12_01_0034_paid_call_key_checks': paidCallKeyChecks,
  '2026_12_01_0035_upto_exposure': uptoExposure,
  '2026_12_01_0036_finality_follow_first': finalityFollowFirst,
  '2026_12_02_0037_receiver_channels': receiverChannels,
  '2026_12_02_0039_payer_channels': payerChannels,
  '2026_12_02_0040_wallet_floats': walletFloats,
  '2026_12_02_0041_payer_channel_idle': payerChannelIdle,
};

export const migrationProvider: MigrationProvider = {
  getMigrations: () => Promise.resolve(MIGRATIONS),
};
