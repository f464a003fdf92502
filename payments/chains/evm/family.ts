/**
 * The EVM family (viem): what the flows ask of a network whose row says `evm`, assembled from this
 * folder. Payments are EIP-3009 TransferWithAuthorization (the exact scheme, exact.ts), and to a
 * target that asks for it a Permit2 witness transfer (permit2.ts), or an upto permit to a target
 * that offers upto (upto.ts), for both of which our wallet approves Permit2 once per token (approval.ts); our wallet submits and pays gas for settlements, refunds
 * and that approval.
 */
import { maxUint256 } from 'viem';
import { NETWORK_TABLE, type NetworkName } from '../../basics/networkTable';
import { fail, ok } from '../../basics/result';
import { encodePaymentHeader } from '../../x402/headers';
import { givePermit2Approval } from './approval';
import { asksPermit2, PERMIT2_ADDRESS } from './permit2';
import { probe } from '../reachability';
import type { ChainFamily } from '../family';
import { followEvmTransfer } from './finality';
import { followEvmFacilitatorSettlement, reconcileEvmSettlement, settleEvmDirectly, stillValid } from './settle';
import { readEvmTargetPayment } from './readPayment';
import { reconcileEvmRefund, sendEvmRefund } from './refund';
import { verifyEvmPayment } from './verify';
import { isUpto } from '../../x402/choose';
import { EVM_UPTO_INCOMING } from './uptoIncoming/index';

/** The EIP-712 domain clients sign with: every EVM network of the table has one. */
function eip712Extra(network: NetworkName): { name: string; version: string } {
  const { eip712 } = NETWORK_TABLE[network];
  if (eip712 === undefined) throw new Error(`NETWORK_TABLE gives ${network} no EIP-712 domain`);
  return { name: eip712.name, version: eip712.version };
}

export const EVM_FAMILY: ChainFamily = {
  name: 'evm',
  facilitatorPaysFees: false,
  uptoIncoming: EVM_UPTO_INCOMING,
  serviceAddress: (chains) => chains.evm.account?.address,
  offerExtra: (network) => eip712Extra(network),
  verifyPayment: (payment, offered, network, deps, options) =>
    verifyEvmPayment(payment, offered, network, deps, options),
  recheckBeforeFacilitator: (record, deps) => Promise.resolve(stillValid(record, deps)),
  settleDirectly: settleEvmDirectly,
  followFacilitatorSettlement: followEvmFacilitatorSettlement,
  reconcileSettlement: reconcileEvmSettlement,
  sendRefund: sendEvmRefund,
  reconcileRefund: (refund, deps) =>
    refund.txHash === null
      ? Promise.resolve(refund.pending(null))
      : reconcileEvmRefund({ ...refund, txHash: refund.txHash }, deps),
  gasToken: 'native gas token',
  async walletHoldings(chains, network) {
    const owner = chains.evm.account?.address;
    if (owner === undefined) return ok(undefined);
    const [asset, gas] = await Promise.all([
      chains.evm.usdcBalance(network, owner),
      chains.evm.gasBalance(network, owner),
    ]);
    if (!asset.ok) return fail(asset.reason, asset.details);
    if (!gas.ok) return fail(gas.reason, gas.details);
    return ok({ asset: asset.value, gas: gas.value });
  },
  walletShortage: ({ chains, balances }, choice, nowMs) => balances.evmShortage(chains, choice, nowMs),
  async spendingApproval(chains, choice) {
    if (!asksPermit2(choice.requirements)) return ok(undefined);
    const owner = chains.evm.account?.address;
    if (owner === undefined) return fail('no_wallet', 'EVM_PRIVATE_KEY is not configured');
    const allowance = await chains.evm.permit2Allowance(choice.network, owner);
    if (!allowance.ok) return allowance;
    // We approve every unit, once: an allowance that no longer covers this payment is approved again.
    if (allowance.value >= BigInt(choice.requirements.maxAmountRequired) && allowance.value > maxUint256 / 2n)
      return ok(undefined);
    const token = chains.evm.networks.get(choice.network)?.usdc;
    if (token === undefined) return fail('network_not_enabled', `${choice.network} is not an enabled EVM network`);
    return ok({ network: choice.network, token, owner, spender: PERMIT2_ADDRESS });
  },
  giveApproval: (approval, store, deps) => givePermit2Approval(deps, approval.network, store),
  // An EVM balance needs no account of the payTo's: any address can receive the token.
  recipientAccountProblem: () => Promise.resolve(undefined),
  async signPayment(chains, choice, { now, nonce }) {
    // Through Permit2 (upto, or exact asking for it): the payment is named by its Permit2 nonce.
    const permitted = isUpto(choice)
      ? chains.evm.signUptoPermit2Transfer(choice.requirements, { now, nonce })
      : asksPermit2(choice.requirements)
        ? chains.evm.signPermit2Transfer(choice.requirements, { now, nonce })
        : undefined;
    if (permitted !== undefined) {
      const permit = await permitted;
      if (!permit.ok) return permit;
      return ok({
        network: permit.value.network,
        payment: permit.value.payment,
        header: encodePaymentHeader(permit.value.payment),
        payer: permit.value.payment.payload.permit2Authorization.from,
        reference: permit.value.nonce,
        expiresAt: { unixSeconds: permit.value.unusableFrom },
      });
    }
    const signed = await chains.evm.signTransferAuthorization(choice.requirements, { now, nonce });
    if (!signed.ok) return signed;
    const { network, payment, header, authorization } = signed.value;
    return ok({
      network,
      payment,
      header,
      payer: authorization.from,
      reference: authorization.nonce,
      expiresAt: { unixSeconds: authorization.validBefore },
    });
  },
  referenceFields: (reference) => ({ nonce: reference, payerSignature: null }),
  readOurPayment: readEvmTargetPayment,
  followToFinality: followEvmTransfer,
  checkReachable: (chains, network, timeoutMs) => {
    const clients = chains.evm.networks.get(network);
    if (!clients) return Promise.reject(new Error(`${network} is not an enabled network`));
    // viem's request keeps its own (longer) timeout; the probe does not wait for it.
    return probe(() => clients.publicClient.getBlockNumber({ cacheTime: 0 }), timeoutMs).then(() => {});
  },
  chainIdentity: async (chains, network, timeoutMs) => {
    const clients = chains.evm.networks.get(network);
    if (!clients) throw new Error(`${network} is not an enabled network`);
    const answered = await probe(() => clients.publicClient.getChainId(), timeoutMs);
    const expected = NETWORK_TABLE[network].chainId;
    return answered === expected
      ? { kind: 'same' }
      : { kind: 'other', answered: `chain id ${answered}`, expected: `chain id ${expected}` };
  },
};
