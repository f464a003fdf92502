// The local Solana cluster's clock, over its JSON-RPC endpoint as any client sees it: idle, it makes
// a new slot with a new blockhash every SLOT_DURATION_MS, as a live cluster does; a transaction
// signed with a blockhash a few slots old still lands, one older than BLOCKHASH_VALIDITY_BLOCKS is
// refused with BlockhashNotFound (sendTransaction, simulateTransaction, isBlockhashValid agree), a
// duplicate with AlreadyProcessed; the two clusters never share a blockhash.
import {
  appendTransactionMessageInstructions,
  createSolanaRpc,
  createTransactionMessage,
  getBase64EncodedWireTransaction,
  getSignatureFromTransaction,
  pipe,
  setTransactionMessageFeePayerSigner,
  setTransactionMessageLifetimeUsingBlockhash,
  signTransactionMessageWithSigners,
  type Blockhash,
  type Rpc,
  type SolanaRpcApi,
} from '@solana/kit';
import { getTransferSolInstruction } from '@solana-program/system';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SolanaNetworkName } from '../../devnet/networks';
import { generateSolanaKey, type SolanaKey } from '../../devnet/svm/keys';
import { BLOCKHASH_VALIDITY_BLOCKS, SLOT_DURATION_MS, SolanaLedger } from '../../devnet/svm/ledger';
import { startSolanaRpcServer, type SolanaRpcServer } from '../../devnet/svm/rpc-server';

const SOL = 1_000_000_000n;

interface Cluster {
  ledger: SolanaLedger;
  server: SolanaRpcServer;
  rpc: Rpc<SolanaRpcApi>;
}

const clusters: Cluster[] = [];
let sender: SolanaKey;
let recipient: SolanaKey;

async function startCluster(network: SolanaNetworkName): Promise<Cluster> {
  const ledger = new SolanaLedger(network, (await generateSolanaKey()).signer);
  ledger.airdrop(sender.address, 100n * SOL);
  const server = await startSolanaRpcServer(ledger);
  const cluster = { ledger, server, rpc: createSolanaRpc(server.url) };
  clusters.push(cluster);
  return cluster;
}

beforeAll(async () => {
  [sender, recipient] = await Promise.all([generateSolanaKey(), generateSolanaKey()]);
});

afterAll(async () => {
  for (const { ledger, server } of clusters) {
    ledger.close();
    await server.close();
  }
});

/** A transfer of `lamports` from the sender, signed with the given blockhash. */
async function transfer(blockhash: Blockhash, lamports: bigint) {
  const message = pipe(
    createTransactionMessage({ version: 0 }),
    (draft) => setTransactionMessageFeePayerSigner(sender.signer, draft),
    (draft) => setTransactionMessageLifetimeUsingBlockhash({ blockhash, lastValidBlockHeight: 0n }, draft),
    (draft) =>
      appendTransactionMessageInstructions(
        [getTransferSolInstruction({ source: sender.signer, destination: recipient.address, amount: lamports })],
        draft,
      ),
  );
  const transaction = await signTransactionMessageWithSigners(message);
  return { wire: getBase64EncodedWireTransaction(transaction), signature: getSignatureFromTransaction(transaction) };
}

/** What the endpoint answers to sendTransaction: the signature, or the error a node gives (its err and message). */
async function send(server: SolanaRpcServer, wire: string, skipPreflight = false): Promise<unknown> {
  const response = await fetch(server.url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      jsonrpc: '2.0',
      id: 1,
      method: 'sendTransaction',
      params: [wire, { encoding: 'base64', skipPreflight }],
    }),
  });
  const answer = (await response.json()) as {
    result?: string;
    error?: { code: number; message: string; data?: { err?: unknown } };
  };
  if (answer.error) return { refused: answer.error.data?.err, code: answer.error.code, message: answer.error.message };
  return answer.result;
}

const blockhashNotFound = {
  refused: 'BlockhashNotFound',
  code: -32002,
  message: 'Transaction simulation failed: Blockhash not found',
};
const alreadyProcessed = {
  refused: 'AlreadyProcessed',
  code: -32002,
  message: 'Transaction simulation failed: This transaction has already been processed',
};

async function simulationError(rpc: Rpc<SolanaRpcApi>, wire: string): Promise<unknown> {
  const { value } = await rpc.simulateTransaction(wire as never, { encoding: 'base64', sigVerify: true }).send();
  return value.err;
}

/** Polls the endpoint until its slot is past `slot`; bounded, as a client waiting for the next block would. */
async function slotAfter(rpc: Rpc<SolanaRpcApi>, slot: bigint): Promise<bigint> {
  const deadline = Date.now() + 50 * SLOT_DURATION_MS;
  for (;;) {
    const current = await rpc.getSlot().send();
    if (current > slot) return current;
    if (Date.now() > deadline) throw new Error(`the slot stayed at ${slot} for ${50 * SLOT_DURATION_MS} ms`);
    await new Promise((resolve) => setTimeout(resolve, SLOT_DURATION_MS / 4));
  }
}

describe('the local Solana cluster keeps time like a live one', () => {
  it('makes new slots with new blockhashes while idle; the previous blockhash stays valid; block height is the slot', async () => {
    const { rpc, server } = await startCluster('solana-devnet');
    const first = await rpc.getLatestBlockhash().send();
    const firstSlot = first.context.slot;
    expect(first.value.lastValidBlockHeight).toBe(firstSlot + BLOCKHASH_VALIDITY_BLOCKS);

    const laterSlot = await slotAfter(rpc, firstSlot);

    const later = await rpc.getLatestBlockhash().send();
    expect(later.context.slot).toBeGreaterThanOrEqual(laterSlot);
    expect(later.value.blockhash).not.toBe(first.value.blockhash);
    expect(later.value.lastValidBlockHeight).toBe(later.context.slot + BLOCKHASH_VALIDITY_BLOCKS);
    expect((await rpc.isBlockhashValid(first.value.blockhash).send()).value).toBe(true);
    expect((await rpc.isBlockhashValid(later.value.blockhash).send()).value).toBe(true);
    const [slot, height] = [await rpc.getSlot().send(), await rpc.getBlockHeight().send()];
    expect(height).toBeGreaterThanOrEqual(slot);

    // The same transfer signed in two slots is two transactions, and both land.
    const before = await rpc.getBalance(recipient.address).send();
    const [once, again] = [
      await transfer(first.value.blockhash, SOL + 1_000n),
      await transfer(later.value.blockhash, SOL + 1_000n),
    ];
    expect(again.signature).not.toBe(once.signature);
    expect([await send(server, once.wire), await send(server, again.wire)]).toEqual([once.signature, again.signature]);
    expect((await rpc.getBalance(recipient.address).send()).value).toBe(before.value + 2n * (SOL + 1_000n));
  });

  describe('with the clock held, slot by slot', () => {
    let cluster: Cluster;

    beforeAll(async () => {
      cluster = await startCluster('solana-devnet');
      // Stopped, so that only advanceSlot() moves it: the window's edges are then exact.
      cluster.ledger.close();
    });

    it('lands a transaction whose blockhash is a few slots old, and up to BLOCKHASH_VALIDITY_BLOCKS old', async () => {
      const { ledger, rpc, server } = cluster;
      const { value: old } = await rpc.getLatestBlockhash().send();
      for (let slot = 0; slot < 5; slot += 1) ledger.advanceSlot();
      expect((await rpc.getLatestBlockhash().send()).value.blockhash).not.toBe(old.blockhash);

      const fewSlotsOld = await transfer(old.blockhash, SOL + 1_001n);
      expect(await simulationError(rpc, fewSlotsOld.wire)).toBeNull();
      expect(await send(server, fewSlotsOld.wire)).toBe(fewSlotsOld.signature);
      expect((await rpc.getSignatureStatuses([fewSlotsOld.signature]).send()).value[0]).toMatchObject({ err: null });

      // The last block height at which it can land, as getLatestBlockhash announced it.
      while (ledger.slot < old.lastValidBlockHeight) ledger.advanceSlot();
      expect(await rpc.getBlockHeight().send()).toBe(old.lastValidBlockHeight);
      expect((await rpc.isBlockhashValid(old.blockhash).send()).value).toBe(true);
      const atTheEdge = await transfer(old.blockhash, SOL + 1_002n);
      expect(await send(server, atTheEdge.wire)).toBe(atTheEdge.signature);
    });

    it('refuses a transaction whose blockhash is older than the window, or unknown, with BlockhashNotFound', async () => {
      const { ledger, rpc, server } = cluster;
      const { value: old } = await rpc.getLatestBlockhash().send();
      const signedThen = await transfer(old.blockhash, SOL + 1_003n);
      for (let slot = 0n; slot <= BLOCKHASH_VALIDITY_BLOCKS; slot += 1n) ledger.advanceSlot();
      expect(await rpc.getBlockHeight().send()).toBe(old.lastValidBlockHeight + 1n);

      expect((await rpc.isBlockhashValid(old.blockhash).send()).value).toBe(false);
      expect(await simulationError(rpc, signedThen.wire)).toBe('BlockhashNotFound');
      expect(await send(server, signedThen.wire)).toEqual(blockhashNotFound);
      expect(await send(server, signedThen.wire, true)).toEqual(blockhashNotFound);
      expect((await rpc.getSignatureStatuses([signedThen.signature]).send()).value[0]).toBeNull();

      const unknown = await transfer('11111111111111111111111111111111' as Blockhash, SOL + 1_004n);
      expect(await send(server, unknown.wire)).toEqual(blockhashNotFound);

      // replaceRecentBlockhash simulates it with the latest blockhash instead, and names that one.
      const { value } = await rpc
        .simulateTransaction(signedThen.wire as never, { encoding: 'base64', replaceRecentBlockhash: true })
        .send();
      expect(value.err).toBeNull();
      expect(value.replacementBlockhash).toEqual({
        blockhash: ledger.latestBlockhash(),
        lastValidBlockHeight: ledger.slot + BLOCKHASH_VALIDITY_BLOCKS,
      });
    });

    it('refuses a transaction already processed with AlreadyProcessed, while its blockhash is valid', async () => {
      const { ledger, rpc, server } = cluster;
      const { value: recent } = await rpc.getLatestBlockhash().send();
      const once = await transfer(recent.blockhash, SOL + 1_005n);
      expect(await send(server, once.wire)).toBe(once.signature);
      ledger.advanceSlot();
      expect(await simulationError(rpc, once.wire)).toBe('AlreadyProcessed');
      expect(await send(server, once.wire)).toEqual(alreadyProcessed);
      expect(await send(server, once.wire, true)).toEqual(alreadyProcessed);
    });
  });

  it("keeps the two clusters' blockhashes apart: a transaction signed for one is unknown to the other", async () => {
    const [devnet, mainnet] = [clusters[0]!, await startCluster('solana')];
    const { value } = await devnet.rpc.getLatestBlockhash().send();
    expect((await mainnet.rpc.isBlockhashValid(value.blockhash).send()).value).toBe(false);
    const forDevnet = await transfer(value.blockhash, SOL + 1_006n);
    expect(await send(mainnet.server, forDevnet.wire)).toEqual(blockhashNotFound);
    expect(await send(devnet.server, forDevnet.wire)).toBe(forDevnet.signature);
  });
});
