// JSON-RPC and Solana error codes as a node returns them, and the error a method handler throws to
// answer with one of them.
export const INVALID_REQUEST = -32600;
export const METHOD_NOT_FOUND = -32601;
export const INVALID_PARAMS = -32602;
export const PARSE_ERROR = -32700;
export const PREFLIGHT_FAILURE = -32002;
export const SIGNATURE_VERIFICATION_FAILURE = -32003;
export const UNSUPPORTED_TRANSACTION_VERSION = -32015;

export class RpcError extends Error {
  constructor(
    readonly code: number,
    message: string,
    readonly data?: unknown,
  ) {
    super(message);
  }
}

/** The refusal of an encoding a node does not accept there. */
export function unsupportedEncoding(encoding: unknown): RpcError {
  return new RpcError(INVALID_PARAMS, `Invalid params: unsupported encoding ${String(encoding)}`);
}

export type Params = unknown[];
export type Config = Record<string, unknown>;
