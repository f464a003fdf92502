// getSignaturesForAddress on the local Solana cluster, over its JSON-RPC endpoint as kit's client
// sees it: the signatures of the executed transactions that name the address, newest first, with
// slot, error, block time and commitment; `limit`, `before` and `until` page them as a node does,
// and a limit outside 1 to 1000 is refused. The service finds a facilitator's transaction by it.
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
  type Address,
  type Rpc,
  type Signature,
  type SolanaRpcApi,
} from '@solana/kit';
import { getTransferSolInstruction } from '@solana-program/system';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateSolanaKey, type SolanaKey } from '../../devnet/svm/keys';
import { SolanaLedger } from '../../devnet/svm/ledger';
import { startSolanaRpcServer, type SolanaRpcServer } from '../../devnet/svm/rpc-server';

const SOL = 1_000_000_000n;

let ledger: SolanaLedger;
let server: SolanaRpcServer;
let rpc: Rpc<SolanaRpcApi>;
let sender: SolanaKey;
let recipient: SolanaKey;
let other: SolanaKey;

beforeAll(async () => {
  [sender, recipient, other] = await Promise.all([generateSolanaKey(), generateSolanaKey(), generateSolanaKey()]);
  ledger = new SolanaLedger('solana-devnet', (await generateSolanaKey()).signer);
  ledger.airdrop(sender.address, 100n * SOL);
  server = await startSolanaRpcServer(ledger);
  rpc = createSolanaRpc(server.url);
});

afterAll(async () => {
  ledger.close();
  await server.close();
});

/** Sends `lamports` from the sender to `destination` and returns the transaction's signature. */
async function transfer(destination: Address, lamports: bigint): Promise<Signature> {
  const { value: lifetime } = await rpc.getLatestBlockhash().send();
  const message = pipe(
    createTransactionMessage({ version: 0 }),
    (draft) => setTransactionMessageFeePayerSigner(sender.signer, draft),
    (draft) => setTransactionMessageLifetimeUsingBlockhash(lifetime, draft),
    (draft) =>
      appendTransactionMessageInstructions(
        [getTransferSolInstruction({ source: sender.signer, destination, amount: lamports })],
        draft,
      ),
  );
  const transaction = await signTransactionMessageWithSigners(message);
  await rpc.sendTransaction(getBase64EncodedWireTransaction(transaction), { encoding: 'base64' }).send();
  return getSignatureFromTransaction(transaction);
}

describe('getSignaturesForAddress on the local cluster', () => {
  it('lists the transactions naming the address, newest first, and pages them with limit, before and until', async () => {
    const first = await transfer(recipient.address, SOL);
    const elsewhere = await transfer(other.address, SOL);
    const second = await transfer(recipient.address, 2n * SOL);

    const all = await rpc.getSignaturesForAddress(recipient.address, { commitment: 'confirmed' }).send();
    expect(all.map((entry) => entry.signature)).toEqual([second, first]);
    expect(all[0]).toMatchObject({ err: null, memo: null, confirmationStatus: 'finalized' });
    expect(typeof all[0]!.slot).toBe('bigint');
    expect(Number(all[0]!.blockTime)).toBeGreaterThan(0);
    // The sender signed all three.
    const sent = await rpc.getSignaturesForAddress(sender.address).send();
    expect(sent.map((entry) => entry.signature)).toEqual([second, elsewhere, first]);

    const newest = await rpc.getSignaturesForAddress(sender.address, { limit: 1 }).send();
    expect(newest.map((entry) => entry.signature)).toEqual([second]);
    const older = await rpc.getSignaturesForAddress(sender.address, { before: second }).send();
    expect(older.map((entry) => entry.signature)).toEqual([elsewhere, first]);
    const newer = await rpc.getSignaturesForAddress(sender.address, { until: first }).send();
    expect(newer.map((entry) => entry.signature)).toEqual([second, elsewhere]);
    const unknown = (await generateSolanaKey()).address;
    expect(await rpc.getSignaturesForAddress(unknown).send()).toEqual([]);
  });

  it('refuses a limit outside 1 to 1000, as a node does', async () => {
    for (const limit of [0, 1001]) {
      await expect(rpc.getSignaturesForAddress(recipient.address, { limit }).send()).rejects.toThrow(/limit/i);
    }
  });
});
