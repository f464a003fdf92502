/**
 * The bundled OpenAPI document and the openapi-backend instance that routes and validates
 * requests against it. openapi-backend 5.21 validates documents against the 3.0 schema only, so
 * the definition check is skipped here (the document is linted by redocly in CI instead); request
 * and response validation run through Ajv, which handles the 3.1 schemas.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { OpenAPIBackend, type Document } from 'openapi-backend';
import addFormatsModule from 'ajv-formats';
import type Ajv from 'ajv';
import { NO_LEAP_SECOND } from '../handlers/getPayments';
import { WALLET_ADDRESS } from '../handlers/getRelayLimits';
import {
  BASIC_AUTH_USERNAME,
  BODY_FIELDS,
  COOKIE_VALUE,
  givenBodyFields,
  HEADER_VALUE,
  TOKEN,
} from '../payments/basics/http/request';

const addFormats = ((addFormatsModule as unknown as { default?: typeof addFormatsModule }).default ??
  addFormatsModule) as unknown as (ajv: Ajv) => Ajv;

export const DOCUMENT_PATH = fileURLToPath(new URL('../openapi/dist/openapi.json', import.meta.url));

export function loadDocument(): Document & Record<string, unknown> {
  // Bundled by `npm run bundle` from the document redocly lints: read as the document it is.
  return JSON.parse(readFileSync(DOCUMENT_PATH, 'utf8')) as Document & Record<string, unknown>;
}

class Backend extends OpenAPIBackend {
  override validateDefinition() {
    return this.definition;
  }

  /**
   * openapi-backend rebuilds its flat list of operations (lodash over the whole document) on every
   * routing step of every request. The document never changes after init, so the list is built
   * once; nothing in openapi-backend or here writes to an operation.
   */
  override async init() {
    await super.init();
    const operations = Object.freeze(this.router.getOperations().map((operation) => Object.freeze(operation)));
    this.router.getOperations = () => operations as typeof operations & ReturnType<typeof this.router.getOperations>;
    return this;
  }
}

/**
 * `quick` is openapi-backend's lazy mode: validators are compiled on the first request of their
 * operation instead of all at start (Ajv compiling every request and response validator took 2.3 s
 * of the start's CPU; response validators are never used by the server), and the bundled document
 * is dereferenced synchronously. The skipped document validation is ours to skip anyway (above).
 * After listening, warmValidators compiles the request validators in the background.
 */
export async function createBackend(document: Document): Promise<OpenAPIBackend> {
  const definition = structuredClone(document);
  requireDecimalNumbers(definition);
  const api = new Backend({
    definition,
    strict: true,
    validate: true,
    quick: true,
    coerceTypes: true,
    ajvOpts: { allErrors: true, strict: true },
    customizeAjv: (ajv) => addFormats(ajv),
  });
  await api.init();
  return api;
}

/** How a number parameter (query, header, path) must be written: decimal digits, an optional minus sign, and a fraction for `number`. */
export const DECIMAL_INTEGER = /^-?[0-9]+$/;
export const DECIMAL_NUMBER = /^-?[0-9]+(\.[0-9]+)?$/;

const OPERATION_METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'] as const;

interface ParameterLike {
  $ref?: string;
  schema?: { type?: unknown };
}

/**
 * Parameters arrive as text, and Ajv's coercion reads text as JavaScript does: `0x10` as 16,
 * ` 5` and `1e1` as numbers. The request validators see each integer or number parameter first
 * as text in plain decimal digits, then as the document's schema (which coerces it): `limit=0x10`
 * is a 400, `limit=16` reaches the handler as 16. The server's copy of the document only; the
 * document itself says `type: integer`, whose text form is its decimal digits.
 */
function requireDecimalNumbers(document: Document): void {
  const components = (document.components?.parameters ?? {}) as Record<string, ParameterLike>;
  const done = new Set<ParameterLike>();
  const strict = (parameter: ParameterLike) => {
    const target = parameter.$ref?.startsWith('#/components/parameters/')
      ? components[parameter.$ref.slice('#/components/parameters/'.length)]
      : parameter;
    if (target === undefined || done.has(target)) return;
    done.add(target);
    const type = target.schema?.type;
    if (type !== 'integer' && type !== 'number') return;
    const pattern = (type === 'integer' ? DECIMAL_INTEGER : DECIMAL_NUMBER).source;
    target.schema = { allOf: [{ type: 'string', pattern }, target.schema] } as ParameterLike['schema'];
  };
  for (const item of Object.values(document.paths ?? {}) as Array<Record<string, unknown> | undefined>) {
    if (item === undefined) continue;
    for (const parameter of (item.parameters ?? []) as ParameterLike[]) strict(parameter);
    for (const method of OPERATION_METHODS) {
      const operation = item[method] as { parameters?: ParameterLike[] } | undefined;
      for (const parameter of operation?.parameters ?? []) strict(parameter);
    }
  }
}

/**
 * Compiles each operation's request validators, one operation per turn of the event loop, so the
 * first requests after a start do not pay for it and requests in between are not held up.
 */
export function warmValidators(api: OpenAPIBackend): Promise<void> {
  const operationIds = api.router
    .getOperations()
    .map((operation) => operation.operationId)
    .filter((operationId): operationId is string => operationId !== undefined);
  return new Promise((resolve) => {
    const next = (index: number) => {
      const operationId = operationIds[index];
      if (operationId === undefined) {
        resolve();
        return;
      }
      api.validator.getRequestValidatorsForOperation(operationId);
      setImmediate(() => {
        next(index + 1);
      });
    };
    next(0);
  });
}

interface AjvLikeError {
  instancePath?: string;
  message?: string;
  keyword?: string;
  params?: AjvLikeParams;
  /** Set by Ajv on errors of a propertyNames schema: the offending name. */
  propertyName?: string;
}

/** The params of the keywords described in words, as Ajv sets them; other keywords have their own. */
interface AjvLikeParams {
  additionalProperty?: string;
  missingProperty?: string;
  allowedValues?: unknown;
  pattern?: string;
  [param: string]: unknown;
}

/** The document's patterns in words: each is the same expression the server checks with. */
const PATTERN_WORDS = new Map<string, string>([
  [TOKEN.source, "must be an HTTP token (letters, digits and !#$%&'*+-.^_`|~)"],
  [HEADER_VALUE.source, 'must not contain CR, LF, NUL, DEL or another control character, nor characters beyond U+00FF'],
  [COOKIE_VALUE.source, 'must not contain a semicolon, a control character, nor characters beyond U+00FF'],
  [BASIC_AUTH_USERNAME.source, 'must not contain a colon'],
  [DECIMAL_INTEGER.source, 'must be a whole number in decimal digits, as 16 (not 0x10, +16, 1e1 or with spaces)'],
  [DECIMAL_NUMBER.source, 'must be a number in decimal digits, as 1.5 (not 0x10, +1.5, 15e-1 or with spaces)'],
  [
    NO_LEAP_SECOND.source,
    'must be a date-time with seconds from 00 to 59: a leap second (23:59:60) names no instant this service can read',
  ],
  [
    WALLET_ADDRESS.source,
    'must be an EVM address (0x and 40 hex digits) or a Solana address (32 to 44 base58 characters)',
  ],
]);

function valueAt(input: unknown, instancePath: string): unknown {
  let value = input;
  for (const part of instancePath.split('/').slice(1)) {
    if (typeof value !== 'object' || value === null) return undefined;
    value = (value as Record<string, unknown>)[part.replace(/~1/g, '/').replace(/~0/g, '~')];
  }
  return value;
}

/**
 * One line per problem: where it is and what is wrong, in words a client developer can act on.
 * `input` is what was validated (e.g. `{requestBody}`), to name the fields a `not` rule refused.
 */
export function describeValidationErrors(errors: AjvLikeError[] | null | undefined, input?: unknown): string {
  if (!errors || errors.length === 0) return 'the request does not match the interface';
  // A propertyNames failure comes with the failure of the name itself, which says more.
  const lines = errors
    .filter((error) => error.keyword !== 'propertyNames')
    .map((error) => {
      const where = (error.instancePath ?? '').replace(/^\//, '').replace(/\//g, '.') || 'request';
      const params = error.params ?? {};
      let message = error.message ?? 'is invalid';
      const patternWords = PATTERN_WORDS.get(String(params.pattern));
      if (error.keyword === 'additionalProperties' && params.additionalProperty) {
        message = `has an unknown property "${params.additionalProperty}"`;
      } else if (error.keyword === 'enum' && Array.isArray(params.allowedValues)) {
        message = `must be one of ${params.allowedValues.join(', ')}`;
      } else if (error.keyword === 'required' && params.missingProperty === 'requestBody' && where === 'request') {
        // The operation's requestBody is `required: true` and the request has none.
        return 'requestBody is required: send the JSON body this operation takes';
      } else if (error.keyword === 'required' && params.missingProperty) {
        message = `is missing the required property "${params.missingProperty}"`;
      } else if (error.keyword === 'pattern' && patternWords !== undefined) {
        message = patternWords;
      } else if (error.keyword === 'not') {
        const value = valueAt(input, error.instancePath ?? '');
        const given = typeof value === 'object' && value !== null ? givenBodyFields(value) : [];
        // CallBodyFieldConflict is the only `not` of the document's requests.
        if (given.length > 1) message = `gives ${given.join(' and ')}: give at most one of ${BODY_FIELDS.join(', ')}`;
      }
      if (error.propertyName !== undefined)
        return `${where} has the name ${JSON.stringify(error.propertyName)}, which ${message}`;
      return `${where} ${message}`;
    });
  return [...new Set(lines)].join('; ');
}
