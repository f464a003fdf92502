// The JSON-RPC methods the local Solana endpoint answers, by kind: the cluster itself, accounts and
// token balances (rpc-accounts.ts), transactions (rpc-transactions.ts). Each answers in the shape a
// node gives.
import { getBase64Encoder, type Address } from '@solana/kit';
import { getTokenDecoder, getTokenSize, TOKEN_PROGRAM_ADDRESS } from '@solana-program/token';
import type { SolanaNetworkName } from '../networks.js';
import type { SolanaLedger } from './ledger.js';
import { feeOfMessage } from './transaction-facts.js';
import { accountInfo, encodeAccount, uiTokenAmount } from './rpc-accounts.js';
import { INVALID_PARAMS, RpcError, type Config, type Params } from './rpc-error.js';
import { sendTransaction, signaturesForAddress, simulateTransaction, transactionInfo } from './rpc-transactions.js';

type Methods = Record<string, (params: Params) => unknown>;
type WithContext = (value: unknown) => { context: { slot: bigint }; value: unknown };

const GENESIS_HASHES: Record<SolanaNetworkName, string> = {
  solana: '5eykt4UsFv8P8NJdTREpY1vzqKqZKvdpKuc147dw2N9d',
  'solana-devnet': 'EtWTRABZaYq6iMfeYKouRu166VU2xqa1wcaWoxPkrZBG',
};

export function rpcMethods(ledger: SolanaLedger): Methods {
  const context = () => ({ slot: ledger.slot });
  const withContext: WithContext = (value) => ({ context: context(), value });
  return {
    ...clusterMethods(ledger, withContext),
    ...accountMethods(ledger, withContext),
    ...transactionMethods(ledger, withContext),
  };
}

function clusterMethods(ledger: SolanaLedger, withContext: WithContext): Methods {
  return {
    getHealth: () => 'ok',
    getGenesisHash: () => GENESIS_HASHES[ledger.network],
    getSlot: () => ledger.slot,
    // Every slot has its block (none is skipped), so the block height is the slot.
    getBlockHeight: () => ledger.slot,
    getLatestBlockhash: () => withContext(ledger.latestBlockhashLifetime()),
    isBlockhashValid: ([blockhash]) => withContext(ledger.isBlockhashValid(blockhash as string)),
    getMinimumBalanceForRentExemption: ([size]) => ledger.svm.minimumBalanceForRentExemption(BigInt(size as number)),
    getFeeForMessage: ([message]) => withContext(feeOfMessage(getBase64Encoder().encode(message as string))),
  };
}

function accountMethods(ledger: SolanaLedger, withContext: WithContext): Methods {
  return {
    getBalance: ([address]) => withContext(ledger.lamports(address as Address)),
    getAccountInfo: ([address, config]) =>
      withContext(accountInfo(ledger, address as Address, config as Config | undefined)),
    getMultipleAccounts: ([addresses, config]) =>
      withContext(
        (addresses as Address[]).map((address) => accountInfo(ledger, address, config as Config | undefined)),
      ),
    getTokenAccountBalance: ([address]) => {
      const account = ledger.svm.getAccount(address as Address);
      if (
        !account.exists ||
        account.programAddress !== TOKEN_PROGRAM_ADDRESS ||
        account.data.length !== getTokenSize()
      ) {
        throw new RpcError(INVALID_PARAMS, 'Invalid param: not a Token account');
      }
      const token = getTokenDecoder().decode(account.data);
      return withContext(uiTokenAmount(token.amount, ledger.decimalsOf(token.mint)));
    },
    getTokenAccountsByOwner: ([owner, filter, config]) => {
      const { mint, programId } = (filter ?? {}) as { mint?: Address; programId?: Address };
      if (programId !== undefined && programId !== TOKEN_PROGRAM_ADDRESS) return withContext([]);
      const accounts = ledger.svm
        .getProgramAccounts(TOKEN_PROGRAM_ADDRESS)
        .filter((account) => account.data.length === getTokenSize())
        .filter((account) => {
          const token = getTokenDecoder().decode(account.data);
          return token.owner === owner && (mint === undefined || token.mint === mint);
        });
      return withContext(
        accounts.map((account) => ({
          pubkey: account.address,
          account: encodeAccount(ledger, account, config as Config | undefined),
        })),
      );
    },
  };
}

function transactionMethods(ledger: SolanaLedger, withContext: WithContext): Methods {
  return {
    simulateTransaction: ([wire, config]) => simulateTransaction(ledger, wire as string, (config ?? {}) as Config),
    sendTransaction: ([wire, config]) => sendTransaction(ledger, wire as string, (config ?? {}) as Config),
    getSignatureStatuses: ([signatures]) =>
      withContext(
        (signatures as string[]).map((signature) => {
          const executed = ledger.executedTransaction(signature);
          if (!executed) return null;
          return {
            slot: executed.slot,
            confirmations: null,
            err: executed.err,
            status: executed.err === null ? { Ok: null } : { Err: executed.err },
            confirmationStatus: ledger.commitmentOf(executed),
          };
        }),
      ),
    getTransaction: ([signature, config]) => transactionInfo(ledger, signature as string, (config ?? {}) as Config),
    getSignaturesForAddress: ([address, config]) =>
      signaturesForAddress(ledger, address as string, (config ?? {}) as Config),
  };
}
