/**
 * The Solana family (@solana/kit): what the flows ask of a network whose row says `solana`,
 * assembled from this folder. Payments are partially signed transactions (the exact scheme,
 * exact.ts) that the settler co-signs as fee payer: our wallet, or a facilitator's.
 */
import { caip2Of } from '../../basics/networkTable';
import { fail, ok } from '../../basics/result';
import type { ChainFamily } from '../family';
import type { VerifiedClientPayment } from '../types';
import { abortableProbe } from '../reachability';
import { followSolanaTransfer } from './finality';
import { readSolanaTargetPayment } from './readPayment';
import { reconcileSolanaRefund, sendSolanaRefund } from './refund';
import { solanaRecipientProblem } from './recipient';
import { followSolanaFacilitatorSettlement, reconcileSolanaSettlement, settleSolanaDirectly } from './settle';
import { verifySolanaPayment } from './verify';

export const SOLANA_FAMILY: ChainFamily = {
  name: 'solana',
  facilitatorPaysFees: true,
  serviceAddress: (chains) => chains.svm.signer?.address,
  offerExtra: (_network, feePayer) => ({ feePayer }),
  async verifyPayment(payment, offered, network, deps) {
    const verified = await verifySolanaPayment(payment, offered, network, deps);
    if (!verified.ok) return verified;
    // The decoded transaction and our signature stay inside: settling asks verifySolanaPayment for them.
    const publicPart: VerifiedClientPayment & Partial<Pick<typeof verified.value, 'inspected' | 'coSigned'>> = {
      ...verified.value,
    };
    delete publicPart.inspected;
    delete publicPart.coSigned;
    return ok(publicPart);
  },
  recheckBeforeFacilitator: (record, deps) => record.reverify(deps),
  settleDirectly: settleSolanaDirectly,
  followFacilitatorSettlement: followSolanaFacilitatorSettlement,
  reconcileSettlement: reconcileSolanaSettlement,
  sendRefund: sendSolanaRefund,
  reconcileRefund: (refund, deps) =>
    refund.txHash === null
      ? Promise.resolve(refund.pending(null))
      : reconcileSolanaRefund({ ...refund, txHash: refund.txHash }, deps),
  // The builder reads our balance itself.
  gasToken: 'SOL',
  async walletHoldings(chains, network) {
    const owner = chains.svm.signer?.address;
    if (owner === undefined) return ok(undefined);
    const [asset, gas] = await Promise.all([
      chains.svm.usdcBalance(network, owner),
      chains.svm.gasBalance(network, owner),
    ]);
    if (!asset.ok) return fail(asset.reason, asset.details);
    if (!gas.ok) return fail(gas.reason, gas.details);
    return ok({ asset: asset.value, gas: gas.value });
  },
  walletShortage: () => Promise.resolve(undefined),
  // SPL transfers need no standing approval.
  spendingApproval: () => Promise.resolve(ok(undefined)),
  giveApproval: () => Promise.resolve(fail('not_needed', 'Solana payments need no approval')),
  recipientAccountProblem: solanaRecipientProblem,
  async signPayment(chains, choice) {
    const built = await chains.svm.buildExactPayment(choice.requirements);
    if (!built.ok) return built;
    const { network, payment, header, payer, payerSignature, lastValidBlockHeight } = built.value;
    return ok({
      network,
      payment,
      header,
      payer,
      reference: payerSignature,
      expiresAt: { blockHeight: lastValidBlockHeight },
    });
  },
  referenceFields: (reference) => ({ nonce: null, payerSignature: reference }),
  readOurPayment: readSolanaTargetPayment,
  followToFinality: followSolanaTransfer,
  checkReachable: (chains, network, timeoutMs) => {
    const clients = chains.svm.networks.get(network);
    if (!clients) return Promise.reject(new Error(`${network} is not an enabled network`));
    return abortableProbe(
      () => clients.rpc.getSlot().send({ abortSignal: AbortSignal.timeout(timeoutMs) }),
      timeoutMs,
    ).then(() => {});
  },
  chainIdentity: async (chains, network, timeoutMs) => {
    const clients = chains.svm.networks.get(network);
    if (!clients) throw new Error(`${network} is not an enabled network`);
    const answered: string = await abortableProbe(
      () => clients.rpc.getGenesisHash().send({ abortSignal: AbortSignal.timeout(timeoutMs) }),
      timeoutMs,
    );
    // The CAIP-2 reference of a Solana cluster is the first 32 characters of its genesis hash.
    const reference = caip2Of(network).slice('solana:'.length);
    return answered.startsWith(reference)
      ? { kind: 'same' }
      : { kind: 'other', answered: `genesis hash ${answered}`, expected: `a genesis hash starting ${reference}` };
  },
};
