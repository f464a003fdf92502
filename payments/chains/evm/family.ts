/**
 * The EVM family (viem): what the flows ask of a network whose row says `evm`, assembled from this
 * folder. Payments are EIP-3009 TransferWithAuthorization (the exact scheme, exact.ts); our wallet
 * submits and pays gas for settlements and refunds.
 */
import { NETWORK_TABLE, type NetworkName } from '../../networkTable';
import { ok } from '../../result';
import { probe } from '../reachability';
import type { ChainFamily } from '../family';
import { followEvmTransfer } from './finality';
import { followEvmFacilitatorSettlement, reconcileEvmSettlement, settleEvmDirectly, stillValid } from './settle';
import { readEvmTargetPayment } from './readPayment';
import { reconcileEvmRefund, sendEvmRefund } from './refund';
import { verifyEvmPayment } from './verify';

/** The EIP-712 domain clients sign with: every EVM network of the table has one. */
function eip712Extra(network: NetworkName): { name: string; version: string } {
  const { eip712 } = NETWORK_TABLE[network];
  if (eip712 === undefined) throw new Error(`NETWORK_TABLE gives ${network} no EIP-712 domain`);
  return { name: eip712.name, version: eip712.version };
}

export const EVM_FAMILY: ChainFamily = {
  name: 'evm',
  facilitatorPaysFees: false,
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
  walletShortage: ({ chains, balances }, choice, nowMs) => balances.evmShortage(chains, choice, nowMs),
  async signPayment(chains, choice, { now, nonce }) {
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
    return probe(() => clients.publicClient.getBlockNumber({ cacheTime: 0 }), timeoutMs);
  },
};
