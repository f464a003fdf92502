/**
 * Typing of handlers from the generated `operations` of the document: a handler can only return a
 * status its operation declares, with the body the document gives for it.
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { Logger } from 'pino';
import type { operations } from '../codegen/api';
import type { AuthenticatedKey } from '../payments/accounts/accounts';
import type { HandlerDeps } from './deps';

export type OperationId = keyof operations;

type Responses<K extends OperationId> = operations[K]['responses'];
type JsonBody<R> = R extends { content: { 'application/json': infer B } } ? B : never;
type NumericStatus<K extends OperationId> = Extract<keyof Responses<K>, number>;

export type JsonReply<K extends OperationId> = {
  [S in NumericStatus<K>]: { status: S; body: JsonBody<Responses<K>[S]>; headers?: Record<string, string> };
}[NumericStatus<K>];

/** A response whose bytes are not JSON of ours: the document page, a target's answer passed through. */
export interface RawReply {
  status: number;
  raw: Buffer | string;
  /** Sent exactly as given (no charset added); '' for an answer without content, sent with no body and no content type. */
  contentType: string;
  headers?: Record<string, string | string[]>;
}

export type Reply<K extends OperationId> = JsonReply<K> | RawReply;

type RequestBodyOf<K extends OperationId> = operations[K] extends {
  requestBody?: { content: { 'application/json': infer B } };
}
  ? B
  : undefined;
type ParametersOf<K extends OperationId> = operations[K] extends { parameters: infer P } ? P : never;
/** The parameters of one place (query, path); an optional place (every parameter optional) is still an object. */
type Part<P, N extends string> =
  P extends Partial<Record<N, infer Q>>
    ? [NonNullable<Q>] extends [never]
      ? Record<string, never>
      : NonNullable<Q>
    : Record<string, never>;

export interface RequestContext<K extends OperationId> {
  operationId: K;
  body: RequestBodyOf<K>;
  query: Part<ParametersOf<K>, 'query'>;
  params: Part<ParametersOf<K>, 'path'>;
  headers: IncomingHttpHeaders;
  /** The authenticated API key, on operations secured by x-api-key. */
  apiKey: AuthenticatedKey | undefined;
  requestId: string;
  log: Logger;
  /** Aborted when the client goes away. */
  signal: AbortSignal;
}

export type Handler<K extends OperationId> = (ctx: RequestContext<K>, deps: HandlerDeps) => Promise<Reply<K>>;

export type HandlerMap = { [K in OperationId]?: Handler<K> };
