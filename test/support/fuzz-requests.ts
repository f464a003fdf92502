/**
 * Requests made from the OpenAPI document itself, per operation: valid ones (every parameter,
 * header and body drawn from its schema) and invalid ones (a valid request with exactly one
 * thing broken: a body that breaks its schema, a missing required body, malformed JSON, a
 * parameter or header out of its schema, a missing or wrong API key). Generated target URLs
 * point only at the given loopback targets or at names under .invalid, and X-PAYMENT values are
 * never real payments.
 */
import fc from 'fast-check';
import { schemaArbitraries, type SchemaArbitraries } from './schema-arbitrary';

export const HTTP_METHODS = ['GET', 'POST', 'PUT', 'DELETE', 'PATCH'] as const;

export interface FuzzRequest {
  operationId: string;
  valid: boolean;
  /** For an invalid request: what it breaks. */
  why?: string;
  /** Only the status this is: a wrong credential must be 401 whatever else is wrong. */
  expectStatus?: number;
  method: string;
  path: string;
  headers: Record<string, string>;
  body?: unknown;
  rawBody?: string;
}

export interface Operation {
  operationId: string;
  method: string;
  /** The path template, e.g. /webhooks/{id}. */
  template: string;
  parameters: Array<{
    name: string;
    in: 'path' | 'query' | 'header';
    required: boolean;
    schema: Record<string, any>;
    examples: unknown[];
  }>;
  body?: { required: boolean; schema: Record<string, any> };
  apiKey: boolean;
  responses: Record<string, any>;
}

export interface FuzzSettings {
  /** Valid api_url values: the harness's loopback targets and .invalid names. */
  apiUrls: fc.Arbitrary<string>;
  /** x-api-key of a funded account. */
  apiKey: string;
  /** Keys that must be refused: revoked, unknown, of another shape. */
  refusedKeys: string[];
}

export function operationsOf(document: Record<string, any>): Operation[] {
  const deref = (node: any) => {
    while (node && typeof node.$ref === 'string')
      node = node.$ref
        .slice(2)
        .split('/')
        .reduce((at: any, part: string) => at?.[part], document);
    return node;
  };
  const operations: Operation[] = [];
  for (const [template, item] of Object.entries<Record<string, any>>(document.paths)) {
    for (const method of HTTP_METHODS) {
      const operation = item[method.toLowerCase()];
      if (!operation) continue;
      const parameters = [...(item.parameters ?? []), ...(operation.parameters ?? [])].map(deref).map((p: any) => ({
        name: p.name as string,
        in: p.in,
        required: p.required === true,
        schema: p.schema ?? {},
        examples: [
          ...(p.example !== undefined ? [p.example] : []),
          ...Object.values<any>(p.examples ?? {}).map((example) => deref(example)?.value),
        ].filter((v) => v !== undefined),
      }));
      const requestBody = deref(operation.requestBody);
      const jsonBody = requestBody?.content?.['application/json'];
      const security = operation.security ?? document.security ?? [];
      const apiKey = security.some((requirement: Record<string, unknown>) => 'ApiKeyAuth' in requirement);
      operations.push({
        operationId: operation.operationId,
        method,
        template,
        // x-api-key is declared as a header parameter too (for generated clients): the key is `apiKey`'s, never drawn.
        parameters: parameters.filter(
          (parameter) => !(apiKey && parameter.in === 'header' && parameter.name.toLowerCase() === 'x-api-key'),
        ),
        body: jsonBody ? { required: requestBody.required === true, schema: jsonBody.schema } : undefined,
        apiKey,
        responses: operation.responses,
      });
    }
  }
  return operations;
}

/** Header values HTTP can carry: visible ASCII with inner spaces, never blank at either end. */
const headerText = fc
  .string({
    unit: fc.integer({ min: 0x20, max: 0x7e }).map((code) => String.fromCharCode(code)),
    minLength: 1,
    maxLength: 40,
  })
  .map((value) => value.trim())
  .filter((value) => value.length > 0);

/** X-PAYMENT values that are no payment at all: garbage, base64 of garbage, payments of the wrong shape. */
export const malformedPayment: fc.Arbitrary<string> = fc.oneof(
  headerText,
  fc.jsonValue({ maxDepth: 2 }).map((value) => Buffer.from(JSON.stringify(value)).toString('base64')),
  fc
    .record(
      {
        x402Version: fc.constantFrom(1, 2, '1', 0),
        scheme: fc.constantFrom('exact', 'upto', ''),
        network: fc.constantFrom('base-sepolia', 'solana-devnet', 'base', 'nowhere'),
        payload: fc.jsonValue({ maxDepth: 1 }),
      },
      { requiredKeys: [] },
    )
    .map((value) => Buffer.from(JSON.stringify(value)).toString('base64')),
);

function pathSegment(value: unknown): string | null {
  const segment = encodeURIComponent(String(value));
  // "." and ".." are dot-segments: a URL cannot carry them as a parameter value.
  return segment === '.' || segment === '..' ? null : segment;
}

export function requestArbitraries(document: Record<string, any>, operation: Operation, settings: FuzzSettings) {
  const arbitraries: SchemaArbitraries = schemaArbitraries(document, {
    overrides: { '#/components/schemas/CallApiUrl': settings.apiUrls },
  });

  function parameterValue(parameter: Operation['parameters'][number]): fc.Arbitrary<unknown> {
    const name = parameter.name.toLowerCase();
    if (name === 'x-payment') return malformedPayment;
    const schema = arbitraries.resolve(parameter.schema) as Record<string, any>;
    if (parameter.in === 'header' && schema.type === 'string' && !schema.enum && !schema.format && !schema.pattern)
      return headerText;
    const drawn = arbitraries.valid(parameter.schema);
    // The document's own examples are values a real client sends: they reach past checks the schema does not state.
    const examples = parameter.examples.filter((example) => arbitraries.accepts(parameter.schema, example));
    return examples.length > 0 ? fc.oneof(fc.constantFrom(...examples), drawn) : drawn;
  }

  type Parts = { params: Record<string, unknown>; body: unknown; hasBody: boolean };

  const paramModel: Record<string, fc.Arbitrary<unknown>> = {};
  for (const parameter of operation.parameters)
    paramModel[`${parameter.in}:${parameter.name}`] = parameterValue(parameter);
  const requiredParams = operation.parameters.filter((p) => p.required).map((p) => `${p.in}:${p.name}`);
  const params = fc.record(paramModel, { requiredKeys: requiredParams });
  // An optional body is sent nine times in ten: without it there is little to look at.
  const optionalBodyPresent = fc.integer({ min: 0, max: 9 }).map((n) => n > 0);
  const body = operation.body
    ? fc.record({
        value: arbitraries.valid(operation.body.schema),
        present: operation.body.required ? fc.constant(true) : optionalBodyPresent,
      })
    : fc.constant({ value: undefined, present: false });
  const validParts: fc.Arbitrary<Parts> = fc
    .tuple(params, body)
    .map(([p, b]) => ({ params: p, body: b.value, hasBody: b.present }))
    .filter((parts) =>
      Object.entries(parts.params).every(([key, value]) =>
        key.startsWith('path:') ? pathSegment(value) !== null : true,
      ),
    );

  function build(
    parts: Parts,
    extra: Partial<FuzzRequest> & { valid: boolean },
    apiKey: string | null = settings.apiKey,
  ): FuzzRequest {
    let path = operation.template;
    const query = new URLSearchParams();
    const headers: Record<string, string> = {};
    for (const [key, value] of Object.entries(parts.params)) {
      const [where, name] = [key.slice(0, key.indexOf(':')), key.slice(key.indexOf(':') + 1)];
      if (where === 'path') path = path.replace(`{${name}}`, pathSegment(value) ?? encodeURIComponent(String(value)));
      else if (where === 'query') query.append(name, String(value));
      else headers[name] = String(value);
    }
    if (operation.apiKey && apiKey !== null) headers['x-api-key'] = apiKey;
    const search = query.toString();
    const request: FuzzRequest = {
      operationId: operation.operationId,
      method: operation.method,
      path: search ? `${path}?${search}` : path,
      headers,
      ...extra,
    };
    if (parts.hasBody) request.body = parts.body;
    return request;
  }

  const valid = validParts.map((parts) => build(parts, { valid: true }));

  const broken: Array<fc.Arbitrary<FuzzRequest>> = [];
  if (operation.body) {
    const badBody = arbitraries.invalid(operation.body.schema);
    if (badBody) {
      broken.push(
        fc
          .tuple(validParts, badBody)
          .map(([parts, { value, why }]) =>
            build({ ...parts, body: value, hasBody: true }, { valid: false, why: `body ${why}` }),
          ),
      );
    }
    if (operation.body.required) {
      broken.push(validParts.map((parts) => build({ ...parts, hasBody: false }, { valid: false, why: 'no body' })));
    }
    broken.push(
      fc
        .tuple(validParts, fc.constantFrom('{"api_url": ', '{', 'not json', '{"a":1}}', '[1,]'))
        .map(([parts, raw]) =>
          build({ ...parts, hasBody: false }, { valid: false, why: 'malformed JSON', rawBody: raw }),
        ),
    );
  }
  for (const parameter of operation.parameters) {
    const key = `${parameter.in}:${parameter.name}`;
    let bad = arbitraries.invalid(parameter.schema);
    if (!bad) continue;
    bad = bad.filter(({ value }) => {
      // A value must survive its trip through HTTP as itself: text or a number (no null, boolean or object).
      if (typeof value !== 'string' && typeof value !== 'number') return false;
      // On the wire every value is text: a number is no wrong type for a string parameter.
      if (typeof value !== 'string' && [parameter.schema.type].flat().includes('string')) return false;
      const textValue = String(value);
      if (parameter.in === 'path') return textValue.length > 0 && pathSegment(textValue) !== null;
      if (parameter.in === 'header') return /^[\x21-\x7e]*$/.test(textValue);
      return true;
    });
    broken.push(
      fc
        .tuple(validParts, bad)
        .map(([parts, { value, why }]) =>
          build(
            { ...parts, params: { ...parts.params, [key]: value } },
            { valid: false, why: `${parameter.in} ${parameter.name} ${why}` },
          ),
        ),
    );
  }
  if (operation.apiKey) {
    broken.push(
      validParts.map((parts) => build(parts, { valid: false, why: 'no x-api-key', expectStatus: 401 }, null)),
    );
    broken.push(
      fc
        .tuple(validParts, fc.constantFrom(...settings.refusedKeys))
        .map(([parts, key]) => build(parts, { valid: false, why: `x-api-key ${key} refused`, expectStatus: 401 }, key)),
    );
  }
  const invalid = broken.length > 0 ? fc.oneof(...broken) : null;
  return { valid, invalid, accepts: arbitraries.accepts };
}

/** The template filled with values its path parameters accept (the same each run), for requests where they do not matter. */
export function examplePath(document: Record<string, any>, template: string): string {
  const operation = operationsOf(document).find((candidate) => candidate.template === template);
  if (!operation) return template;
  const arbitraries = schemaArbitraries(document);
  let path = template;
  for (const parameter of operation.parameters.filter((p) => p.in === 'path')) {
    const value =
      parameter.examples[0] ??
      fc.sample(
        arbitraries.valid(parameter.schema).filter((v) => pathSegment(v) !== null),
        { seed: 1, numRuns: 1 },
      )[0];
    path = path.replace(`{${parameter.name}}`, pathSegment(value)!);
  }
  return path;
}
