// Accounts as the local Solana endpoint answers them: encoded as asked (base58, base64 or
// jsonParsed for SPL token accounts and mints), with token amounts in a node's shape.
import { getBase58Decoder, getBase64Decoder, type Address, type EncodedAccount } from '@solana/kit';
import {
  getMintDecoder,
  getMintSize,
  getTokenDecoder,
  getTokenSize,
  TOKEN_PROGRAM_ADDRESS,
} from '@solana-program/token';
import type { SolanaLedger } from './ledger.js';
import { unsupportedEncoding, type Config } from './rpc-error.js';

const RENT_EPOCH_EXEMPT = 18_446_744_073_709_551_615n;

export function accountInfo(ledger: SolanaLedger, address: Address, config: Config | undefined) {
  const account = ledger.svm.getAccount(address);
  return account.exists ? encodeAccount(ledger, account, config) : null;
}

export function encodeAccount(ledger: SolanaLedger, account: EncodedAccount, config: Config | undefined) {
  const encoding = config?.encoding ?? 'base58';
  return {
    data: encodeAccountData(ledger, account, encoding),
    executable: account.executable,
    lamports: account.lamports,
    owner: account.programAddress,
    rentEpoch: RENT_EPOCH_EXEMPT,
    space: BigInt(account.data.length),
  };
}

function encodeAccountData(ledger: SolanaLedger, account: EncodedAccount, encoding: unknown): unknown {
  if (encoding === 'jsonParsed') {
    const parsed = parseTokenProgramAccount(ledger, account);
    if (parsed) return parsed;
    return [getBase64Decoder().decode(account.data), 'base64'];
  }
  if (encoding === 'base64') return [getBase64Decoder().decode(account.data), 'base64'];
  if (encoding === 'base58') return [getBase58Decoder().decode(account.data), 'base58'];
  throw unsupportedEncoding(encoding);
}

/** The jsonParsed form of SPL token accounts and mints; other accounts fall back to base64 as on a node. */
function parseTokenProgramAccount(ledger: SolanaLedger, account: EncodedAccount): unknown {
  if (account.programAddress !== TOKEN_PROGRAM_ADDRESS) return undefined;
  const space = account.data.length;
  if (space === getTokenSize()) {
    const token = getTokenDecoder().decode(account.data);
    return {
      program: 'spl-token',
      space,
      parsed: {
        type: 'account',
        info: {
          isNative: token.isNative.__option === 'Some',
          mint: token.mint,
          owner: token.owner,
          state: ['uninitialized', 'initialized', 'frozen'][token.state],
          tokenAmount: uiTokenAmount(token.amount, ledger.decimalsOf(token.mint)),
        },
      },
    };
  }
  if (space === getMintSize()) {
    const mint = getMintDecoder().decode(account.data);
    return {
      program: 'spl-token',
      space,
      parsed: {
        type: 'mint',
        info: {
          decimals: mint.decimals,
          freezeAuthority: mint.freezeAuthority.__option === 'Some' ? mint.freezeAuthority.value : null,
          isInitialized: mint.isInitialized,
          mintAuthority: mint.mintAuthority.__option === 'Some' ? mint.mintAuthority.value : null,
          supply: mint.supply.toString(),
        },
      },
    };
  }
  return undefined;
}

export function uiTokenAmount(amount: bigint, decimals: number) {
  const digits = amount.toString().padStart(decimals + 1, '0');
  const whole = digits.slice(0, digits.length - decimals);
  const fraction = digits.slice(digits.length - decimals).replace(/0+$/, '');
  const uiAmountString = fraction ? `${whole}.${fraction}` : whole;
  // uiAmount is a float in a node's answer too; nothing in the harness reads it.
  return { amount: amount.toString(), decimals, uiAmount: Number(uiAmountString), uiAmountString };
}
