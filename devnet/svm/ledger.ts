// One Solana cluster in-process: a litesvm ledger with USDC planted at the cluster's canonical mint
// address (6 decimals, the harness's authority as mint authority). Every transaction goes through
// execute(), which keeps what a node would answer about it later (status, slot, balances).
//
// Like a live cluster, it makes a new slot with a new blockhash every SLOT_DURATION_MS whether or
// not anything happens, and a transaction lands only while its blockhash is one of the last
// BLOCKHASH_VALIDITY_BLOCKS: litesvm by itself knows one blockhash only (its latest), so its own
// check is off and the ledger keeps the recent blockhashes and checks their age itself.
import { randomBytes } from 'node:crypto';
import {
  appendTransactionMessageInstructions,
  createTransactionMessage,
  getAddressDecoder,
  getBase58Decoder,
  getBase64Decoder,
  getCompiledTransactionMessageDecoder,
  getTransactionEncoder,
  getTransactionVersionDecoder,
  lamports,
  none,
  pipe,
  setTransactionMessageFeePayerSigner,
  setTransactionMessageLifetimeUsingBlockhash,
  signTransactionMessageWithSigners,
  some,
  type Address,
  type Blockhash,
  type EncodedAccount,
  type MaybeEncodedAccount,
  type Instruction,
  type KeyPairSigner,
  type Transaction,
} from '@solana/kit';
import { getSetComputeUnitLimitInstruction } from '@solana-program/compute-budget';
import {
  findAssociatedTokenPda,
  getCreateAssociatedTokenIdempotentInstruction,
  getMintDecoder,
  getMintEncoder,
  getMintSize,
  getMintToInstruction,
  getTokenDecoder,
  getTokenSize,
  TOKEN_PROGRAM_ADDRESS,
} from '@solana-program/token';
import { LiteSVM, type TransactionMetadata } from 'litesvm';
import { SOLANA_NETWORKS, USDC_DECIMALS, type SolanaNetworkName } from '../networks.js';
import { isFailure, isRejectedBeforeExecution, transactionErrorJson, type SolanaTransactionError } from './errors.js';
import { feeOfMessage, signatureOf } from './transaction-facts.js';

export { feeOfMessage, LAMPORTS_PER_SIGNATURE, signatureOf } from './transaction-facts.js';

/** A live cluster makes a slot about every 400 ms, each block with a new blockhash, busy or idle. */
export const SLOT_DURATION_MS = 400;
/**
 * A transaction lands only while its blockhash is one of the cluster's last 150 (a node's
 * MAX_PROCESSING_AGE): lastValidBlockHeight is the blockhash's block height plus this.
 */
export const BLOCKHASH_VALIDITY_BLOCKS = 150n;

/** A recent blockhash and the last block height at which a transaction using it can land. */
export interface BlockhashLifetime {
  blockhash: Blockhash;
  lastValidBlockHeight: bigint;
}

export interface TokenBalance {
  accountIndex: number;
  mint: Address;
  owner: Address;
  programId: Address;
  amount: bigint;
  decimals: number;
}

/** What a node keeps about a transaction it executed (successfully or not). */
export interface ExecutedTransaction {
  signature: string;
  slot: bigint;
  blockTime: bigint;
  wireTransactionBase64: string;
  version: 'legacy' | 0 | 1;
  err: SolanaTransactionError | null;
  logs: string[];
  computeUnitsConsumed: bigint;
  fee: bigint;
  preBalances: bigint[];
  postBalances: bigint[];
  preTokenBalances: TokenBalance[];
  postTokenBalances: TokenBalance[];
}

export interface SimulationOutcome {
  err: SolanaTransactionError | null;
  logs: string[];
  unitsConsumed: bigint;
  returnData: { programId: Address; data: Uint8Array } | null;
  postAccounts: EncodedAccount[];
}

export type ExecutionOutcome =
  | { executed: true; transaction: ExecutedTransaction }
  | { executed: false; signature: string; err: SolanaTransactionError; logs: string[] };

export class SolanaLedger {
  readonly svm = new LiteSVM().withBlockhashCheck(false);
  readonly mint: Address;
  private readonly executed = new Map<string, ExecutedTransaction>();
  /** The blockhashes still valid, each with the slot (block height) it was made at; the latest last. */
  private readonly recentBlockhashes = new Map<Blockhash, bigint>();
  private latest!: Blockhash;
  private readonly clock: NodeJS.Timeout;
  private helperSequence = 0;
  /** The states kept by snapshot(): what the executed transactions were, and each account's state before it was first written since. */
  private readonly snapshots: {
    executed: Map<string, ExecutedTransaction>;
    accounts: Map<Address, MaybeEncodedAccount>;
  }[] = [];
  /**
   * How many slots deep a transaction is reported `finalized` (`confirmed` until then). 0, as by
   * default: at once. A test of what follows a reorg sets a few slots, as a live cluster's ~32.
   */
  finalizationSlots = 0n;

  constructor(
    readonly network: SolanaNetworkName,
    readonly mintAuthority: KeyPairSigner,
  ) {
    this.mint = SOLANA_NETWORKS[network].usdc as Address;
    // Random blockhashes: a real cluster's blockhashes are its own, which is what keeps a
    // transaction signed for devnet from being valid on mainnet; so here too, and across restarts.
    this.makeBlockhash();
    this.plantUsdcMint();
    this.airdrop(mintAuthority.address, 1_000_000_000_000n);
    // Transactions executed within one slot share it, as on a live cluster.
    this.clock = setInterval(() => this.advanceSlot(), SLOT_DURATION_MS);
    // The sandbox and tests end when their work ends, not when this timer says so.
    this.clock.unref();
  }

  /** Stops the cluster's clock: no new slot or blockhash after this. */
  close(): void {
    clearInterval(this.clock);
  }

  /** The current slot; every slot has a block here (none is skipped), so it is also the block height. */
  get slot(): bigint {
    return this.svm.getClock().slot;
  }

  /**
   * Moves to the next slot with a new blockhash, as the cluster does every SLOT_DURATION_MS on its
   * own; blockhashes that fall out of the validity window are forgotten.
   */
  advanceSlot(): void {
    this.svm.warpToSlot(this.slot + 1n);
    this.makeBlockhash();
    for (const [blockhash, slot] of this.recentBlockhashes) {
      if (slot + BLOCKHASH_VALIDITY_BLOCKS >= this.slot) break;
      this.recentBlockhashes.delete(blockhash);
    }
  }

  latestBlockhash(): Blockhash {
    return this.latest;
  }

  /** The latest blockhash and the last block height at which a transaction using it can land. */
  latestBlockhashLifetime(): BlockhashLifetime {
    return { blockhash: this.latest, lastValidBlockHeight: this.slot + BLOCKHASH_VALIDITY_BLOCKS };
  }

  /** Whether a transaction with this blockhash can still land: one of the last BLOCKHASH_VALIDITY_BLOCKS. */
  isBlockhashValid(blockhash: string): boolean {
    const madeAt = this.recentBlockhashes.get(blockhash as Blockhash);
    return madeAt !== undefined && madeAt + BLOCKHASH_VALIDITY_BLOCKS >= this.slot;
  }

  lamports(address: Address): bigint {
    return this.svm.getBalance(address) ?? 0n;
  }

  airdrop(address: Address, amount: bigint): void {
    const result = this.svm.airdrop(address, lamports(amount));
    if (!result || isFailure(result)) throw new Error(`airdrop to ${address} failed: ${result?.toString()}`);
  }

  async associatedTokenAddress(owner: Address): Promise<Address> {
    const [address] = await findAssociatedTokenPda({ mint: this.mint, owner, tokenProgram: TOKEN_PROGRAM_ADDRESS });
    return address;
  }

  /** The owner's USDC balance in its associated token account; 0 when that account does not exist. */
  async usdcBalance(owner: Address): Promise<bigint> {
    const account = this.svm.getAccount(await this.associatedTokenAddress(owner));
    if (!account.exists || account.programAddress !== TOKEN_PROGRAM_ADDRESS) return 0n;
    return getTokenDecoder().decode(account.data).amount;
  }

  /** Creates the owner's associated USDC account with a real instruction; does nothing when it exists. */
  async createUsdcAccount(owner: Address): Promise<Address> {
    const tokenAccount = await this.associatedTokenAddress(owner);
    await this.submitAsAuthority([this.createAccountInstruction(owner, tokenAccount)]);
    return tokenAccount;
  }

  /** Mints USDC into the owner's associated account, creating that account first when needed. */
  async mintUsdc(owner: Address, amount: bigint): Promise<void> {
    const tokenAccount = await this.associatedTokenAddress(owner);
    await this.submitAsAuthority([
      this.createAccountInstruction(owner, tokenAccount),
      getMintToInstruction({ mint: this.mint, token: tokenAccount, mintAuthority: this.mintAuthority, amount }),
    ]);
  }

  /** Runs a transaction as a node would, and keeps its outcome when it was executed. */
  execute(transaction: Transaction): ExecutionOutcome {
    const signature = signatureOf(transaction);
    const refused = this.refusalBeforeLoading(transaction);
    if (refused !== null) return { executed: false, signature, err: refused, logs: [] };
    const accounts = getCompiledTransactionMessageDecoder().decode(transaction.messageBytes).staticAccounts;
    for (const kept of this.snapshots)
      for (const address of accounts)
        if (!kept.accounts.has(address)) kept.accounts.set(address, this.svm.getAccount(address));
    const preBalances = accounts.map((address) => this.lamports(address));
    const preTokenBalances = this.tokenBalances(accounts);
    const result = this.svm.sendTransaction(transaction);
    const metadata: TransactionMetadata = isFailure(result) ? result.meta() : result;
    const err = isFailure(result) ? transactionErrorJson(result) : null;
    if (err !== null && isRejectedBeforeExecution(err)) {
      return { executed: false, signature, err, logs: metadata.logs() };
    }
    const executed: ExecutedTransaction = {
      signature,
      slot: this.slot,
      blockTime: BigInt(Math.floor(Date.now() / 1000)),
      wireTransactionBase64: getBase64Decoder().decode(getTransactionEncoder().encode(transaction)),
      version: getTransactionVersionDecoder().decode(transaction.messageBytes),
      err,
      logs: metadata.logs(),
      computeUnitsConsumed: metadata.computeUnitsConsumed(),
      fee: feeOfMessage(transaction.messageBytes),
      preBalances,
      postBalances: accounts.map((address) => this.lamports(address)),
      preTokenBalances,
      postTokenBalances: this.tokenBalances(accounts),
    };
    this.executed.set(signature, executed);
    return { executed: true, transaction: executed };
  }

  simulate(transaction: Transaction, { verifySignatures }: { verifySignatures: boolean }): SimulationOutcome {
    const refused = this.refusalBeforeLoading(transaction);
    if (refused !== null) return { err: refused, logs: [], unitsConsumed: 0n, returnData: null, postAccounts: [] };
    // Signature checking is a setting of the whole ledger; nothing else runs while it is off.
    this.svm.withSigverify(verifySignatures);
    let result: ReturnType<LiteSVM['simulateTransaction']>;
    try {
      result = this.svm.simulateTransaction(transaction);
    } finally {
      this.svm.withSigverify(true);
    }
    const metadata = result.meta();
    const returned = metadata.returnData();
    return {
      err: isFailure(result) ? transactionErrorJson(result) : null,
      logs: metadata.logs(),
      unitsConsumed: metadata.computeUnitsConsumed(),
      returnData:
        returned.data().length > 0
          ? { programId: getAddressDecoder().decode(returned.programId()), data: returned.data() }
          : null,
      postAccounts: isFailure(result) ? [] : result.postAccounts(),
    };
  }

  executedTransaction(signature: string): ExecutedTransaction | undefined {
    return this.executed.get(signature);
  }

  /** Every transaction executed and still on the ledger, newest first (as getSignaturesForAddress walks them). */
  executedNewestFirst(): ExecutedTransaction[] {
    return [...this.executed.values()].reverse();
  }

  /** The commitment a node reports an executed transaction at now (see finalizationSlots). */
  commitmentOf(executed: ExecutedTransaction): 'confirmed' | 'finalized' {
    return this.slot >= executed.slot + this.finalizationSlots ? 'finalized' : 'confirmed';
  }

  /**
   * Keeps the ledger's state as it is now, as evm_snapshot does on the local EVM chains; revert(id)
   * goes back to it. Returns its id.
   */
  snapshot(): number {
    this.snapshots.push({ executed: new Map(this.executed), accounts: new Map() });
    return this.snapshots.length - 1;
  }

  /**
   * A reorg back to snapshot `id`: every transaction executed since is forgotten (its signature
   * unknown again, so the same transaction may land again while its blockhash is valid) and every
   * account it wrote is as it was. Slots and blockhashes go on, as a cluster's do. Later snapshots
   * are dropped with it.
   */
  revert(id: number): void {
    const kept = this.snapshots[id];
    if (!kept) throw new Error(`no snapshot ${id} on ${this.network}`);
    // Newest first, so that each account ends as the oldest state kept for it.
    for (const later of this.snapshots.splice(id).reverse())
      for (const [address, account] of later.accounts) {
        if (account.exists) this.svm.setAccount(account);
        else
          this.svm.setAccount({
            address,
            lamports: lamports(0n),
            data: new Uint8Array(),
            programAddress: '11111111111111111111111111111111' as Address,
            executable: false,
            space: 0n,
          });
      }
    this.executed.clear();
    for (const [signature, executed] of kept.executed) this.executed.set(signature, executed);
    // litesvm's own record of processed signatures would refuse a forgotten transaction landing again.
    this.svm.withTransactionHistory(0n);
  }

  /**
   * What a node checks of a transaction before loading its accounts: its blockhash is recent
   * (BlockhashNotFound otherwise; litesvm's own check knows only the latest blockhash, so it is off),
   * and it was not processed already (AlreadyProcessed, also for one that was executed and failed).
   */
  private refusalBeforeLoading(transaction: Transaction): SolanaTransactionError | null {
    const { lifetimeToken } = getCompiledTransactionMessageDecoder().decode(transaction.messageBytes);
    if (!this.isBlockhashValid(lifetimeToken)) return 'BlockhashNotFound';
    if (this.executed.has(signatureOf(transaction))) return 'AlreadyProcessed';
    return null;
  }

  private makeBlockhash(): void {
    this.latest = getBase58Decoder().decode(randomBytes(32)) as Blockhash;
    this.recentBlockhashes.set(this.latest, this.slot);
  }

  private tokenBalances(accounts: readonly Address[]): TokenBalance[] {
    const balances: TokenBalance[] = [];
    accounts.forEach((address, accountIndex) => {
      const account = this.svm.getAccount(address);
      if (!account.exists || account.programAddress !== TOKEN_PROGRAM_ADDRESS || account.data.length !== getTokenSize())
        return;
      const token = getTokenDecoder().decode(account.data);
      balances.push({
        accountIndex,
        mint: token.mint,
        owner: token.owner,
        programId: TOKEN_PROGRAM_ADDRESS,
        amount: token.amount,
        decimals: this.decimalsOf(token.mint),
      });
    });
    return balances;
  }

  decimalsOf(mint: Address): number {
    const account = this.svm.getAccount(mint);
    if (!account.exists || account.data.length !== getMintSize()) return 0;
    return getMintDecoder().decode(account.data).decimals;
  }

  private plantUsdcMint(): void {
    const data = getMintEncoder().encode({
      mintAuthority: some(this.mintAuthority.address),
      supply: 0n,
      decimals: USDC_DECIMALS,
      isInitialized: true,
      freezeAuthority: none(),
    });
    this.svm.setAccount({
      address: this.mint,
      lamports: lamports(this.svm.minimumBalanceForRentExemption(BigInt(data.length))),
      data: new Uint8Array(data),
      programAddress: TOKEN_PROGRAM_ADDRESS,
      executable: false,
      space: BigInt(data.length),
    });
  }

  private createAccountInstruction(owner: Address, tokenAccount: Address): Instruction {
    return getCreateAssociatedTokenIdempotentInstruction({
      payer: this.mintAuthority,
      ata: tokenAccount,
      owner,
      mint: this.mint,
    });
  }

  private async submitAsAuthority(instructions: Instruction[]): Promise<void> {
    // Two identical helper transactions within one slot (one blockhash) would have the same
    // signature, and the second would be refused as already processed: a distinct compute unit
    // limit makes each one unique.
    this.helperSequence += 1;
    const message = pipe(
      createTransactionMessage({ version: 0 }),
      (draft) => setTransactionMessageFeePayerSigner(this.mintAuthority, draft),
      (draft) => setTransactionMessageLifetimeUsingBlockhash(this.latestBlockhashLifetime(), draft),
      (draft) =>
        appendTransactionMessageInstructions(
          [getSetComputeUnitLimitInstruction({ units: 400_000 + this.helperSequence }), ...instructions],
          draft,
        ),
    );
    const transaction = await signTransactionMessageWithSigners(message);
    const outcome = this.execute(transaction);
    const err = outcome.executed ? outcome.transaction.err : outcome.err;
    if (err !== null) {
      const logs = outcome.executed ? outcome.transaction.logs : outcome.logs;
      throw new Error(`harness transaction on ${this.network} failed: ${JSON.stringify(err)}\n${logs.join('\n')}`);
    }
  }
}
