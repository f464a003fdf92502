// A dry run of transferWithAuthorization that reverts is reported with the token's own reason
// (Error(string) decoded from the revert data), not the node's generic "An internal error was
// received": the payer learns what to fix. Against the real local chain.
import { encodeFunctionData, getAddress, parseAbi } from 'viem';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startPeers, type Peers, type PaymentRequirements as PeerRequirements } from '../../devnet/index';
import { createChains, type Chains } from '../../payments/chains/index';
import { revertReason } from '../../payments/chains/evm';
import { NETWORK_TABLE } from '../../payments/basics/networkTable';
import { submitEvmTransaction } from '../../payments/chains/evm/submit';
import { authorizationOf, transferWithAuthorizationData } from '../../payments/chains/evm/verify';
import { SubmissionQueue } from '../../payments/chains/submissions';
import { IN_PROCESS_ONLY } from '../../payments/chains/submissions';
import type { PaymentPayload } from '../../payments/x402/types';
import { relayOffer } from '../support/chains';
import { startProxyService } from '../support/proxy';
import type { TestService } from '../support/service';
import { ifStarted } from '../support/teardown';

const NETWORK = 'base-sepolia';
const USDC = getAddress(NETWORK_TABLE[NETWORK].usdc);
const AHEAD_MS = 120_000;
const nowSeconds = () => BigInt(Math.floor(Date.now() / 1000));

let peers: Peers;
let t: TestService;
let chains: Chains;

beforeAll(async () => {
  peers = await startPeers({ networks: [NETWORK] });
  // A service whose clock runs two minutes ahead of the chain's: an authorization that starts in
  // a minute passes its own time check, and only the chain can say it is not valid yet.
  t = await startProxyService(peers, {}, { clock: { now: () => new Date(Date.now() + AHEAD_MS) } });
  chains = await createChains({
    networks: [{ name: NETWORK, rpcUrl: peers.rpcUrls[NETWORK]!, usdc: USDC }],
    evmPrivateKey: peers.wallets.service.evm.privateKey,
    solanaPrivateKey: undefined,
  });
});

afterAll(async () => {
  await ifStarted(chains)?.close();
  await ifStarted(t)?.stop();
  await ifStarted(peers)?.stop();
});

describe('a reverted dry run', () => {
  it('answers a relay paid with a not yet valid authorization 402 naming the revert reason; nothing moves', async () => {
    const call = { api_url: peers.targets[NETWORK]!.routes.paid.url, method: 'GET' };
    const unpaid = await t.client.post('/relay', call);
    expect(unpaid.status).toBe(402);
    const offer = unpaid.body.accepts[0] as PeerRequirements;
    const { header } = await peers.signEvmPayment(offer, {
      validAfter: nowSeconds() + 60n,
      validBefore: nowSeconds() + 900n,
    });
    const before = await peers.usdcBalance(NETWORK, peers.wallets.client.evm.address);

    const paid = await t.client.post('/relay', call, { headers: { 'X-PAYMENT': header } });

    expect(paid.status).toBe(402);
    expect(paid.body.error).toMatch(/^simulation_failed: .*FiatTokenV2: authorization is not yet valid/);
    expect(paid.body.error).not.toContain('internal error');
    expect(await peers.usdcBalance(NETWORK, peers.wallets.client.evm.address)).toBe(before);
  });

  it('decodes the reasons of calls and gas estimates the token refuses: used nonce, amount above the balance', async () => {
    const offer = await relayOffer(chains, NETWORK, { amountMicroUsdc: 10_300n, resource: 'http://127.0.0.1/paid' });
    const { publicClient } = chains.evm.networks.get(NETWORK)!;
    const service = peers.wallets.service.evm.address;
    const deps = { chains, submissions: new SubmissionQueue(IN_PROCESS_ONLY) };

    // Settled once, then simulated again: the nonce is spent.
    const { payment } = await peers.signEvmPayment(offer);
    const data = transferWithAuthorizationData(authorizationOf(payment as PaymentPayload));
    const settled = await submitEvmTransaction(deps, NETWORK, { to: USDC, data }, () => Promise.resolve(true));
    if (!settled.ok) throw new Error(settled.details);
    await publicClient.waitForTransactionReceipt({ hash: settled.value.hash });
    const used = await publicClient.call({ account: service, to: USDC, data }).catch((error: unknown) => error);
    expect(revertReason(used)).toBe('FiatTokenV2: authorization is used or canceled');
    const again = await submitEvmTransaction(deps, NETWORK, { to: USDC, data }, () => Promise.resolve(true));
    expect(again).toEqual({
      ok: false,
      reason: 'simulation_failed',
      details: 'the transfer reverts: FiatTokenV2: authorization is used or canceled',
    });

    const tooMuch = await peers.signEvmPayment({
      ...offer,
      maxAmountRequired: 1_000_000_000n.toString(),
    });
    const tooMuchData = transferWithAuthorizationData(authorizationOf(tooMuch.payment as PaymentPayload));
    const poor = await publicClient
      .call({ account: service, to: USDC, data: tooMuchData })
      .catch((error: unknown) => error);
    expect(revertReason(poor)).toBe('ERC20: transfer amount exceeds balance');

    // A revert without a reason, and an error that is no revert at all, have none.
    const bare = await publicClient
      .call({
        to: USDC,
        data: encodeFunctionData({ abi: parseAbi(['function nothingHere()']), functionName: 'nothingHere' }),
      })
      .catch((error: unknown) => error);
    expect(bare).toBeInstanceOf(Error);
    expect(revertReason(bare)).toBeUndefined();
    expect(revertReason(new Error('connection refused'))).toBeUndefined();
  });
});
