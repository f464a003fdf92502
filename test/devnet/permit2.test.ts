// Permit2 and x402's two Permit2 proxies on the local chains (contracts/Permit2.sol): the committed
// artifact is what the source compiles to; the planted contracts answer @x402/evm's reads (the
// proxies' Permit2 and witness type strings, Permit2's EIP-712 domain); and unmodified @x402/fetch
// 2.27 with @x402/evm's exact and upto client schemes pays targets served by unmodified
// @x402/express 2.27 asking for Permit2, settled by @x402/evm's facilitator, on MegaETH (MegaUSD,
// 18 decimals, Permit2 only) and on Polygon Amoy (USDC, 6 decimals): the payer approves Permit2 once
// per token, and each payment moves exactly the price (upto: what the target used) on chain.
import { decodePaymentRequiredHeader, decodePaymentResponseHeader } from '@x402/core/http';
import { createTestClient, getAddress, hashDomain, maxUint256, parseAbi, type Address, type Hash } from 'viem';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { permit2Artifact } from '../../contracts/Permit2.artifact.js';
import { localTransport } from '../../devnet/evm/chain.js';
import { compilePermit2, renderPermit2ArtifactModule } from '../../devnet/evm/permit2-artifact.js';
import {
  EXACT_PERMIT2_PROXY_ADDRESS,
  exactPermit2ProxyAbi,
  PERMIT2_ADDRESS,
  permit2Abi,
  UPTO_PERMIT2_PROXY_ADDRESS,
  uptoPermit2ProxyAbi,
} from '../../devnet/evm/permit2.js';
import { CAIP2_NETWORKS, EVM_NETWORKS, startPeers, type EvmNetworkName, type Peers } from '../../devnet/index.js';
import { ifStarted } from '../support/teardown';

const PRICE = 10_000n;
const USED = 4_000n;
const NETWORKS: EvmNetworkName[] = ['megaeth', 'polygon-amoy'];
/** The price in the network's atomic units: MegaUSD has 18 decimals, USDC 6. */
const atomic = (network: EvmNetworkName, micro: bigint) => micro * 10n ** BigInt(EVM_NETWORKS[network].decimals - 6);
const erc20 = parseAbi([
  'function approve(address spender, uint256 amount) returns (bool)',
  'function decimals() view returns (uint8)',
]);

let peers: Peers;

beforeAll(async () => {
  peers = await startPeers({
    networks: NETWORKS,
    pricesMicroUsdc: { paid: PRICE },
    targets: NETWORKS.flatMap((network) => [
      {
        name: `exact-${network}`,
        network,
        x402Version: 2 as const,
        v2Offer: { scheme: 'exact' as const, assetTransferMethod: 'permit2' as const },
      },
      {
        name: `upto-${network}`,
        network,
        x402Version: 2 as const,
        v2Offer: { scheme: 'upto' as const, uptoChargeMicroUsdc: USED },
      },
    ]),
  });
});

afterAll(async () => {
  await ifStarted(peers)?.stop();
});

describe.each(NETWORKS)('Permit2 and the x402 proxies on %s', (network) => {
  const read = (
    address: Address,
    functionName: 'DOMAIN_SEPARATOR' | 'PERMIT2' | 'WITNESS_TYPE_STRING',
  ): Promise<unknown> =>
    peers.evmChains[network]!.publicClient.readContract({
      address,
      abi: [...permit2Abi, ...exactPermit2ProxyAbi, ...uptoPermit2ProxyAbi],
      functionName,
    });

  it('sit at their canonical addresses with the domain and witness types @x402/evm signs', async () => {
    const { chainId } = EVM_NETWORKS[network];
    expect(await read(PERMIT2_ADDRESS, 'DOMAIN_SEPARATOR')).toBe(
      hashDomain({
        domain: { name: 'Permit2', chainId: BigInt(chainId), verifyingContract: PERMIT2_ADDRESS },
        types: {
          EIP712Domain: [
            { name: 'name', type: 'string' },
            { name: 'chainId', type: 'uint256' },
            { name: 'verifyingContract', type: 'address' },
          ],
        },
      }),
    );
    expect(await read(EXACT_PERMIT2_PROXY_ADDRESS, 'PERMIT2')).toBe(PERMIT2_ADDRESS);
    expect(await read(UPTO_PERMIT2_PROXY_ADDRESS, 'PERMIT2')).toBe(PERMIT2_ADDRESS);
    expect(await read(EXACT_PERMIT2_PROXY_ADDRESS, 'WITNESS_TYPE_STRING')).toBe(
      'Witness witness)TokenPermissions(address token,uint256 amount)Witness(address to,uint256 validAfter)',
    );
    expect(await read(UPTO_PERMIT2_PROXY_ADDRESS, 'WITNESS_TYPE_STRING')).toBe(
      'Witness witness)TokenPermissions(address token,uint256 amount)Witness(address to,address facilitator,uint256 validAfter)',
    );
    expect(
      await peers.evmChains[network]!.publicClient.readContract({
        address: getAddress(EVM_NETWORKS[network].usdc),
        abi: erc20,
        functionName: 'decimals',
      }),
    ).toBe(EVM_NETWORKS[network].decimals);
  });
});

describe.each(NETWORKS)('@x402/fetch 2.27 pays @x402/express 2.27 targets asking for Permit2 on %s', (network) => {
  const token = () => getAddress(EVM_NETWORKS[network].usdc);
  const payer = () => peers.wallets.client.evm.address;
  const chain = () => peers.evmChains[network]!;
  const balances = (payTo: string) =>
    Promise.all([
      peers.usdcBalance(network, payer()),
      peers.usdcBalance(network, payTo),
      peers.usdcBalance(network, PERMIT2_ADDRESS),
      peers.usdcBalance(network, EXACT_PERMIT2_PROXY_ADDRESS),
      peers.usdcBalance(network, UPTO_PERMIT2_PROXY_ADDRESS),
    ]);

  it('asks exact with assetTransferMethod permit2 at the price in the token’s decimals; unpaid without an approval', async () => {
    const target = peers.targets[`exact-${network}`]!;
    const unpaid = await fetch(target.routes.paid.url);
    expect(unpaid.status).toBe(402);
    const [offer] = decodePaymentRequiredHeader(unpaid.headers.get('payment-required')!).accepts;
    expect(offer).toMatchObject({
      scheme: 'exact',
      network: CAIP2_NETWORKS[network],
      amount: atomic(network, PRICE).toString(),
      asset: token(),
      extra: { assetTransferMethod: 'permit2', ...EVM_NETWORKS[network].eip712 },
    });

    // Permit2 may move only what the owner approved it for: before the approval nothing settles.
    // The facilitator reads the allowance (through Multicall3, as on a live chain) and says so;
    // @x402/express answers that with 412 and the offer again.
    const before = await balances(target.payTo);
    const response = await peers.x402FetchV2()(target.routes.paid.url);
    expect(response.status).toBe(412);
    expect(decodePaymentRequiredHeader(response.headers.get('payment-required')!).error).toBe(
      'permit2_allowance_required',
    );
    expect(await balances(target.payTo)).toEqual(before);
  });

  it('settles exact through x402ExactPermit2Proxy once Permit2 is approved, moving exactly the price; a replay moves nothing', async () => {
    const target = peers.targets[`exact-${network}`]!;
    // The payer's one approval of Permit2 on this token (x402 asks it of a Permit2 payer), with gas of its own.
    await createTestClient({
      mode: 'hardhat',
      chain: chain().chain,
      transport: localTransport(chain().rpcUrl),
    }).setBalance({ address: payer(), value: 10n ** 18n });
    const approval = await peers.evmWalletClient(network).writeContract({
      address: token(),
      abi: erc20,
      functionName: 'approve',
      args: [PERMIT2_ADDRESS, maxUint256],
      chain: chain().chain,
      account: peers.wallets.client.evm.account,
    });
    expect((await chain().publicClient.waitForTransactionReceipt({ hash: approval })).status).toBe('success');

    const [payerBefore, payeeBefore, ...heldBefore] = await balances(target.payTo);
    const response = await peers.x402FetchV2()(target.routes.paid.url);

    expect(response.status).toBe(200);
    const settlement = decodePaymentResponseHeader(response.headers.get('payment-response')!);
    expect(settlement).toMatchObject({ success: true, network: CAIP2_NETWORKS[network], payer: payer() });
    const receipt = await chain().publicClient.getTransactionReceipt({ hash: settlement.transaction as Hash });
    expect(receipt.status).toBe('success');
    expect(getAddress(receipt.to!)).toBe(EXACT_PERMIT2_PROXY_ADDRESS);
    const price = atomic(network, PRICE);
    expect(await balances(target.payTo)).toEqual([payerBefore - price, payeeBefore + price, ...heldBefore]);

    const paid = target.requests.filter((request) => request.route === 'paid' && request.status === 200);
    const replay = await fetch(target.routes.paid.url, { headers: { 'PAYMENT-SIGNATURE': paid.at(-1)!.payment! } });
    expect(replay.status).toBe(402);
    expect(await balances(target.payTo)).toEqual([payerBefore - price, payeeBefore + price, ...heldBefore]);
  });

  it('settles upto through x402UptoPermit2Proxy: the payer signs the price as a maximum, the target takes what it used', async () => {
    const target = peers.targets[`upto-${network}`]!;
    const unpaid = await fetch(target.routes.paid.url);
    const [offer] = decodePaymentRequiredHeader(unpaid.headers.get('payment-required')!).accepts;
    expect(offer).toMatchObject({
      scheme: 'upto',
      amount: atomic(network, PRICE).toString(),
      extra: { assetTransferMethod: 'permit2', facilitatorAddress: getAddress(peers.facilitatorV2.evmAddress) },
    });

    // An exact-only client cannot pay an upto offer.
    const [payerBefore, payeeBefore, ...heldBefore] = await balances(target.payTo);
    await expect(peers.x402FetchV2()(target.routes.paid.url)).rejects.toThrow();

    const response = await peers.x402FetchV2({ upto: true })(target.routes.paid.url);

    expect(response.status).toBe(200);
    const settlement = decodePaymentResponseHeader(response.headers.get('payment-response')!);
    expect(settlement).toMatchObject({ success: true, network: CAIP2_NETWORKS[network], payer: payer() });
    const receipt = await chain().publicClient.getTransactionReceipt({ hash: settlement.transaction as Hash });
    expect(getAddress(receipt.to!)).toBe(UPTO_PERMIT2_PROXY_ADDRESS);
    const used = atomic(network, USED);
    expect(await balances(target.payTo)).toEqual([payerBefore - used, payeeBefore + used, ...heldBefore]);
  });
});

// Last: solc-js compiles for seconds on this thread, and the chains' idle connections would be reset meanwhile.
describe('the committed artifact', () => {
  it('is what contracts/Permit2.sol compiles to (rebuild: npx tsx devnet/evm/permit2-artifact.ts)', () => {
    expect(renderPermit2ArtifactModule(compilePermit2())).toBe(renderPermit2ArtifactModule(permit2Artifact as never));
  });
});
