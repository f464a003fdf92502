/**
 * Assembly of the HTTP API: request ids, logs and metrics, concurrency caps, body limits, then every
 * operation routed and validated by openapi-backend and answered by its handler. Every error
 * response is built here or by a handler's typed reply, always from the table of error codes
 * (handlers/errors.ts) as {code, error, details}.
 */
import { randomUUID } from 'node:crypto';
import express, { type NextFunction, type Request, type Response } from 'express';
import type { Context, OpenAPIBackend } from 'openapi-backend';
import type { Logger } from 'pino';
import type { HandlerDeps } from '../handlers/deps';
import { ERROR_CODES, errorBody, internalErrorBody, type ErrorCode } from '../handlers/errors';
import type { HandlerMap, OperationId, Reply, RequestContext } from '../handlers/types';
import { authenticateKey, type AuthenticatedKey, type KeyRejection } from '../payments/accounts/accounts';
import { capsMiddleware, holdSlot, type ConcurrencyCaps } from './caps';
import type { ServiceMetrics } from './metrics';
import { createBackend, describeValidationErrors } from './openapi';
import { paidCallOutcome } from './paidCalls';

export const MAX_REQUEST_BODY_BYTES = 1024 * 1024;
const REQUEST_ID_PATTERN = /^[A-Za-z0-9._:-]{1,128}$/;

/** The security result of a key that could not be looked up (not a rejection of the key). */
const LOOKUP_FAILED = 'lookup_failed';

/** The challenge of every 401 of ours: the API key, in the x-api-key header. */
const API_KEY_CHALLENGE = 'ApiKey header="x-api-key"';

const KEY_REJECTION_DETAILS: Record<KeyRejection, string> = {
  missing: 'The x-api-key header is required.',
  malformed: 'The x-api-key header does not hold an API key of this service.',
  unknown: 'The API key is not known.',
  revoked: 'The API key has been revoked.',
};

interface Locals {
  log: Logger;
  requestId: string;
  /** Set once the request reached an operation's handler. */
  operationId?: string;
}

/** The request as dispatchToOperations hands it over: body, query and params are checked before use, not trusted. */
type ApiContext = Context<unknown, unknown, unknown, Record<string, string | string[] | undefined>>;

function locals(res: Response): Locals {
  return res.locals as Locals;
}

const ROUTABLE_METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'] as const;

/** The methods the document gives a path, as the router matches them: the Allow header of a 405. */
function allowedMethods(api: OpenAPIBackend, path: string): string[] {
  return ROUTABLE_METHODS.filter(
    (method) => api.router.matchOperation({ method, path, headers: {}, query: {} }) !== undefined,
  ).map((method) => method.toUpperCase());
}

function sendError(res: Response, code: ErrorCode, details: string | undefined, extra?: object): void {
  res.status(ERROR_CODES[code].status).json(errorBody(code, details, extra));
}

function sendReply(res: Response, reply: Reply<OperationId>): void {
  if (reply.headers) for (const [name, value] of Object.entries(reply.headers)) res.setHeader(name, value);
  res.status(reply.status);
  if ('raw' in reply && reply.contentType === '') {
    // An answer without content (the 202 of an MCP notification): no body, so no content type.
    res.end();
  } else if ('raw' in reply) {
    // setHeader, not res.type(): express would add a charset to a target's content type.
    res.setHeader('Content-Type', reply.contentType);
    res.send(reply.raw);
  } else {
    res.json(reply.body);
  }
}

export interface AppOptions {
  deps: HandlerDeps;
  handlers: HandlerMap;
  caps: ConcurrencyCaps;
  logger: Logger;
  metrics: ServiceMetrics;
}

export interface App {
  express: express.Express;
  api: OpenAPIBackend;
}

export async function createApp({ deps, handlers, caps, logger, metrics }: AppOptions): Promise<App> {
  const api = await createBackend(deps.document as never);
  registerAuthentication(api, deps);
  registerRefusals(api);
  registerOperations(api, handlers, deps, metrics);

  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  app.set('query parser', 'simple');

  app.use(requestLogging(logger, metrics, operationOf(api)));
  app.use(noSniffing);
  app.use(capsMiddleware(caps, (group) => metrics.capRefused(group)));
  app.use(
    express.json({
      limit: MAX_REQUEST_BODY_BYTES,
      // Every body of this interface is JSON, whatever content type the client sent.
      type: () => true,
      strict: false,
    }),
  );
  app.use(dispatchToOperations(api));
  app.use(answerErrors);

  return { express: app, api };
}

/** The x-api-key security scheme: the key looked up (through the cache), or why it was refused. */
function registerAuthentication(api: OpenAPIBackend, deps: HandlerDeps): void {
  api.registerSecurityHandler('ApiKeyAuth', async (c: ApiContext) => {
    const header = c.request.headers['x-api-key'];
    try {
      const result = await authenticateKey(deps.db, Array.isArray(header) ? header[0] : header, deps.apiKeyCache);
      // openapi-backend counts a result with a truthy `error` as a failed authentication.
      return result.ok ? { key: result.key } : { error: result.reason };
    } catch (error) {
      // The key could not be looked up (the database is unreachable): not the client's fault, so
      // not a 401; the unauthorized handler answers the operation's 500 instead.
      return { error: LOOKUP_FAILED, cause: error };
    }
  });
}

/** What openapi-backend answers before any handler runs: unknown path or method, no key, invalid request. */
function registerRefusals(api: OpenAPIBackend): void {
  api.register({
    notFound: (_c: ApiContext, _req: Request, res: Response) =>
      sendError(res, 'not_found', 'No operation of this service has this path.'),
    methodNotAllowed: (c: ApiContext, req: Request, res: Response) => {
      const allowed = allowedMethods(api, req.path);
      res.setHeader('Allow', allowed.join(', '));
      sendError(
        res,
        'method_not_allowed',
        `The method ${c.request.method.toUpperCase()} is not allowed on this path; it supports ${allowed.join(', ')}.`,
      );
    },
    notImplemented: (c: ApiContext, _req: Request, res: Response) => {
      locals(res).operationId = c.operation.operationId;
      sendError(res, 'not_implemented', `${c.operation.operationId} is not enabled on this server yet.`);
    },
    unauthorizedHandler: (c: ApiContext, _req: Request, res: Response) => {
      locals(res).operationId = c.operation.operationId;
      const result = c.security.ApiKeyAuth as
        { error?: KeyRejection | typeof LOOKUP_FAILED; cause?: unknown } | undefined;
      if (result?.error === LOOKUP_FAILED) {
        locals(res).log.error({ err: result.cause }, 'the API key could not be looked up');
        res
          .status(ERROR_CODES.internal_error.status)
          .json(internalErrorBody(locals(res).operationId, locals(res).requestId));
        return;
      }
      // The scheme names the header to send the key in: an MCP client told 401 without it starts
      // an OAuth flow (the MCP authorization's Bearer challenge), which this service has none of.
      res.setHeader('WWW-Authenticate', API_KEY_CHALLENGE);
      sendError(res, 'unauthorized', KEY_REJECTION_DETAILS[result?.error ?? 'missing']);
    },
    validationFail: (c: ApiContext, _req: Request, res: Response) => {
      locals(res).operationId = c.operation.operationId;
      sendError(
        res,
        'validation_failed',
        describeValidationErrors(c.validation.errors as never, { requestBody: c.request.requestBody }),
      );
    },
  });
}

/**
 * Each operation's handler, given the typed request and an abort signal that fires when the client
 * goes away; the outcome of a paid call is counted from its reply.
 */
function registerOperations(
  api: OpenAPIBackend,
  handlers: HandlerMap,
  deps: HandlerDeps,
  metrics: ServiceMetrics,
): void {
  for (const [operationId, handler] of Object.entries(handlers)) {
    api.register(operationId, async (c: ApiContext, req: Request, res: Response) => {
      const { log, requestId } = locals(res);
      locals(res).operationId = operationId;
      const controller = new AbortController();
      res.once('close', () => {
        if (!res.writableFinished) controller.abort();
      });
      const security = c.security.ApiKeyAuth as { key?: AuthenticatedKey } | undefined;
      const ctx: RequestContext<OperationId> = {
        operationId: operationId as OperationId,
        body: c.request.requestBody as never,
        query: c.request.query as never,
        params: c.request.params as never,
        headers: req.headers,
        apiKey: security?.key,
        requestId,
        // The request's logger already carries its id; a second child per request costs more than it tells.
        log,
        signal: controller.signal,
      };
      const reply = await (
        handler as (ctx: RequestContext<OperationId>, deps: HandlerDeps) => Promise<Reply<OperationId>>
      )(ctx, deps);
      const paid = paidCallOutcome(operationId as OperationId, req.headers, reply);
      if (paid) metrics.paidCall(paid.mode, paid.result);
      if (reply.status === 502) logBadGateway(log, 'body' in reply ? reply.body : undefined);
      if (!res.headersSent) sendReply(res, reply);
    });
  }
}

/**
 * Every 502 of ours at warn, with its reason (code and the text of the body), so that an operator
 * sees why a paid call failed without reading the client's answer.
 */
function logBadGateway(log: Logger, body: unknown): void {
  const fields = typeof body === 'object' && body !== null ? (body as Record<string, unknown>) : {};
  const reason = Object.fromEntries(
    ['code', 'error', 'details', 'message', 'webhook_id', 'upstreamStatus']
      .filter((name) => fields[name] !== undefined)
      .map((name) => [name, typeof fields[name] === 'string' ? fields[name].slice(0, 500) : fields[name]]),
  );
  log.warn({ status: 502, ...reason }, 'answered 502');
}

/**
 * The operation a request was for when it never reached a handler (a cap's 429, a 405): the
 * document's operation of its method and path, or undefined.
 */
function operationOf(api: OpenAPIBackend) {
  return (req: Request): string | undefined => {
    try {
      return api.router.matchOperation({ method: req.method, path: req.path, headers: {}, query: {} })?.operationId;
    } catch {
      return undefined;
    }
  };
}

/**
 * The request id (the client's when well formed) on the response and the logger, one log line per
 * request, and its duration in the metrics by operation and status.
 */
function requestLogging(
  logger: Logger,
  metrics: ServiceMetrics,
  operationOfRequest: (req: Request) => string | undefined,
) {
  return (req: Request, res: Response, next: NextFunction) => {
    const incoming = req.headers['x-request-id'];
    const requestId = typeof incoming === 'string' && REQUEST_ID_PATTERN.test(incoming) ? incoming : randomUUID();
    const log = logger.child({ requestId });
    res.locals.requestId = requestId;
    res.locals.log = log;
    res.setHeader('X-Request-Id', requestId);
    const startedAt = process.hrtime.bigint();
    res.once('close', () => {
      const durationMs = Number(process.hrtime.bigint() - startedAt) / 1e6;
      metrics.observeRequest(
        locals(res).operationId ?? operationOfRequest(req),
        req.method,
        res.statusCode,
        durationMs / 1000,
      );
      log.info(
        {
          method: req.method,
          path: req.path,
          status: res.statusCode,
          durationMs: Math.round(durationMs * 10) / 10,
          completed: res.writableFinished,
        },
        'request',
      );
    });
    next();
  };
}

/**
 * Every answer is read as the content type it names, never sniffed: a page of ours (/console,
 * /docs), a text answer (/metrics) or a target's body passed through cannot be run as HTML or a
 * script by a browser that guesses.
 */
function noSniffing(_req: Request, res: Response, next: NextFunction): void {
  res.setHeader('X-Content-Type-Options', 'nosniff');
  next();
}

function dispatchToOperations(api: OpenAPIBackend) {
  return (req: Request, res: Response, next: NextFunction) => {
    // Routing, authentication, validation and the handler all count against the cap until they end.
    const endHold = holdSlot(res);
    // openapi-backend parses a body that is not an object once more, so a JSON string holding an
    // object would pass as that object: hand it the string re-encoded, which parses back to itself.
    // A request without a body is handed over without one (express.json reads an empty body as {}),
    // so an operation whose body is required says that it is missing, not that {} lacks its fields.
    const sent = req.headers['transfer-encoding'] !== undefined || Number(req.headers['content-length'] ?? 0) > 0;
    const body: unknown = !sent ? undefined : typeof req.body === 'string' ? JSON.stringify(req.body) : req.body;
    api
      .handleRequest(
        {
          method: req.method,
          path: req.path,
          body,
          query: req.query as Record<string, string>,
          headers: req.headers as Record<string, string>,
        },
        req,
        res,
      )
      .catch(next)
      .finally(endHold);
  };
}

/** Errors thrown past the handlers: body parsing refusals in the table's terms, anything else an internal error. */
function answerErrors(
  error: Error & { type?: string; status?: number },
  _req: Request,
  res: Response,
  // eslint-disable-next-line @typescript-eslint/no-unused-vars -- express takes a middleware for an error handler only when it declares four parameters
  _next: NextFunction,
): void {
  if (res.headersSent) {
    locals(res).log.error({ err: error }, 'error after the response started');
    res.destroy();
    return;
  }
  if (error.type === 'entity.too.large') {
    sendError(res, 'payload_too_large', `The request body is over the limit of ${MAX_REQUEST_BODY_BYTES} bytes.`);
    return;
  }
  if (error.type === 'entity.parse.failed') {
    sendError(res, 'validation_failed', `The request body is not valid JSON: ${error.message}`);
    return;
  }
  if (error.type === 'encoding.unsupported' || error.type === 'charset.unsupported') {
    sendError(res, 'validation_failed', error.message);
    return;
  }
  if (error.type === 'request.aborted') {
    res.destroy();
    return;
  }
  locals(res).log.error({ err: error }, 'unhandled error');
  res.status(ERROR_CODES.internal_error.status).json(internalErrorBody(locals(res).operationId, locals(res).requestId));
}
