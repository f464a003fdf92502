/**
 * The functions of the x402BatchSettlement contract the receiving side calls or reads (the
 * specification's interface; contracts/BatchSettlement.sol is our local copy).
 */
import { parseAbi } from 'viem';

const CONFIG =
  '(address payer, address payerAuthorizer, address receiver, address receiverAuthorizer, address token, uint40 withdrawDelay, bytes32 salt)';
const CLAIM = `((${CONFIG} channel, uint128 maxClaimableAmount) voucher, bytes signature, uint128 totalClaimed)`;

export const batchSettlementReceiverAbi = parseAbi([
  `function deposit(${CONFIG} config, uint128 amount, address collector, bytes collectorData)`,
  `function claimWithSignature(${CLAIM}[] voucherClaims, bytes authorizerSignature)`,
  'function settle(address receiver, address token)',
  `function refundWithSignature(${CONFIG} config, uint128 amount, uint256 nonce, bytes receiverAuthorizerSignature)`,
  'function channels(bytes32 channelId) view returns (uint128 balance, uint128 totalClaimed)',
  'function pendingWithdrawals(bytes32 channelId) view returns (uint128 amount, uint40 initiatedAt)',
  'function refundNonce(bytes32 channelId) view returns (uint256)',
  'function receivers(address receiver, address token) view returns (uint128 totalClaimed, uint128 totalSettled)',
  'function multicall(bytes[] data) returns (bytes[] results)',
]);
