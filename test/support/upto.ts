/**
 * Paying targets through Permit2 (x402 exact with assetTransferMethod "permit2", and upto), as the
 * e2e files check it: the figures of the upto targets (a maximum, what the "less" targets settle,
 * and what /proxy and /relay charge for them), a settlement's token transfers read from its
 * receipt, our wallet's approvals of Permit2 and their record, and a client's own approval of
 * Permit2, given as its owner would before paying by upto.
 */
import {
  createTestClient,
  getAddress,
  maxUint256,
  parseAbi,
  parseEventLogs,
  type Address,
  type Hash,
  type Hex,
} from 'viem';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { expect } from 'vitest';
import type { Db } from '../../db/index';
import { localTransport } from '../../devnet/evm/chain';
import { PERMIT2_ADDRESS } from '../../devnet/evm/permit2';
import { EVM_NETWORKS, startPeers, type EvmNetworkName, type Peers } from '../../devnet/index';

/** An upto target's price: the maximum we authorize, in micro-USDC. */
export const UPTO_MAXIMUM = 20_000n;
/** What an upto target settling less than its maximum settles of it. */
export const UPTO_USED = 7_500n;
/** ceil(20,000 x 1.03 / 1000): the credits /proxy holds for the maximum plus the fee. */
export const UPTO_RESERVED_CREDITS = 21n;
/** ceil(7,500 x 1.03 / 1000): the credits of what was used plus the fee on it. */
export const UPTO_USED_CREDITS = 8n;
/** ceil(20,000 x 1.03): what a /relay client pays for the maximum with an exact payment. */
export const RELAY_UPTO_MAX_TOTAL = 20_600n;
/** ceil(7,500 x 1.03): what a /relay client pays in the end when the target settled 7,500. */
export const RELAY_UPTO_USED_TOTAL = 7_725n;

/**
 * The local peers of an upto test: the client's network and the target's, every route priced at
 * UPTO_MAXIMUM, and one version 2 target `name` on `network` asking upto and settling UPTO_USED.
 */
export function startUptoPeers(clientNetwork: EvmNetworkName, network: EvmNetworkName, name: string): Promise<Peers> {
  return startPeers({
    networks: [clientNetwork, network],
    pricesMicroUsdc: {
      paid: UPTO_MAXIMUM,
      paidEcho: UPTO_MAXIMUM,
      neverSettles: UPTO_MAXIMUM,
      error: UPTO_MAXIMUM,
      slow: UPTO_MAXIMUM,
    },
    targets: [{ name, network, x402Version: 2, v2Offer: { scheme: 'upto', uptoChargeMicroUsdc: UPTO_USED } }],
  });
}

const erc20 = parseAbi([
  'event Transfer(address indexed from, address indexed to, uint256 value)',
  'event Approval(address indexed owner, address indexed spender, uint256 value)',
  'function approve(address spender, uint256 amount) returns (bool)',
]);

const token = (network: EvmNetworkName) => getAddress(EVM_NETWORKS[network].usdc);

/**
 * The stablecoin's transfers in transaction `hash` on `network`, read from its receipt: a
 * successful call of `calledContract` (the token itself for EIP-3009, else a Permit2 proxy).
 */
export async function tokenTransfers(
  peers: Peers,
  network: EvmNetworkName,
  hash: string,
  calledContract: Address,
): Promise<{ from: Address; to: Address; value: bigint }[]> {
  const receipt = await peers.evmChains[network]!.publicClient.getTransactionReceipt({ hash: hash as Hash });
  expect(receipt.status).toBe('success');
  expect(getAddress(receipt.to!)).toBe(getAddress(calledContract));
  return parseEventLogs({ abi: erc20, logs: receipt.logs, eventName: 'Transfer' })
    .filter((log) => getAddress(log.address) === token(network))
    .map(({ args }) => args);
}

/** Every approval `owner` gave Permit2 on the network's stablecoin, from the chain's logs. */
export async function permit2Approvals(peers: Peers, network: EvmNetworkName, owner: Address) {
  const logs = await peers.evmChains[network]!.publicClient.getLogs({
    address: token(network),
    event: erc20[1],
    args: { owner, spender: PERMIT2_ADDRESS },
    fromBlock: 0n,
  });
  return logs.map((log) => ({ tx: log.transactionHash, value: log.args.value }));
}

/**
 * Our wallet approved Permit2 on the network's stablecoin exactly once, for all it will pay, and
 * recorded that approval (spending_approvals) with the gas the chain shows it cost.
 */
export async function expectOurPermit2ApprovalOnce(peers: Peers, db: Db, network: EvmNetworkName): Promise<void> {
  const ours = peers.wallets.service.evm.address;
  const given = await permit2Approvals(peers, network, ours);
  expect(given.map(({ value }) => value)).toEqual([maxUint256]);
  const rows = await db.selectFrom('spending_approvals').selectAll().where('network', '=', network).execute();
  expect(rows).toHaveLength(1);
  expect(rows[0]).toMatchObject({
    token: token(network).toLowerCase(),
    owner: ours.toLowerCase(),
    spender: PERMIT2_ADDRESS.toLowerCase(),
    tx_hash: given[0]!.tx,
  });
  const receipt = await peers.evmChains[network]!.publicClient.getTransactionReceipt({ hash: given[0]!.tx });
  expect(rows[0]!.confirmed_at).toBeInstanceOf(Date);
  expect(BigInt(rows[0]!.gas_used!)).toBe(receipt.gasUsed);
  expect(BigInt(rows[0]!.gas_fee_wei!)).toBe(receipt.gasUsed * receipt.effectiveGasPrice);
}

/** A payer of its own on `network`: 0.1 USDC, gas, and its one approval of Permit2. */
export async function newUptoPayer(peers: Peers, network: EvmNetworkName): Promise<{ key: Hex; address: Address }> {
  const key = generatePrivateKey();
  const address = privateKeyToAccount(key).address;
  await peers.mint(network, address, 100_000n);
  await approvePermit2AsOwner(peers, network, key);
  return { key, address };
}

/** The owner of `privateKey` approves Permit2 on the network's stablecoin, with gas of its own, as x402 asks of an upto payer. */
export async function approvePermit2AsOwner(peers: Peers, network: EvmNetworkName, privateKey: Hex): Promise<void> {
  const chain = peers.evmChains[network]!;
  const owner = privateKeyToAccount(privateKey);
  await createTestClient({ mode: 'hardhat', chain: chain.chain, transport: localTransport(chain.rpcUrl) }).setBalance({
    address: owner.address,
    value: 10n ** 18n,
  });
  const hash = await peers.evmWalletClient(network, privateKey).writeContract({
    address: token(network),
    abi: erc20,
    functionName: 'approve',
    args: [PERMIT2_ADDRESS, maxUint256],
    chain: chain.chain,
    account: owner,
  });
  expect((await chain.publicClient.waitForTransactionReceipt({ hash })).status).toBe('success');
}
