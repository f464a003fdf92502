/**
 * fast-check arbitraries from the JSON Schemas of the OpenAPI document: values a schema accepts,
 * and values it refuses together with the reason. It covers the subset the document uses ($ref,
 * type and type lists, enum, const, properties/required/additionalProperties/propertyNames,
 * items/minItems/maxItems, numeric bounds, string lengths, pattern, format uri, uuid, date and date-time,
 * allOf/anyOf/oneOf/not). Every value is checked by an independent Ajv (draft 2020-12, the
 * dialect of OpenAPI 3.1) against the schema it was made for: a generator mistake shows up as a
 * filtered value, never as a request of the wrong class.
 */
import fc from 'fast-check';
import Ajv2020Module from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';

type Schema = Record<string, any> | boolean;
type JsonType = 'string' | 'number' | 'integer' | 'boolean' | 'null' | 'object' | 'array';
const JSON_TYPES: JsonType[] = ['string', 'number', 'integer', 'boolean', 'null', 'object', 'array'];

export interface Invalid {
  value: unknown;
  /** What the value breaks, for the failure message. */
  why: string;
}

export interface SchemaArbitraries {
  /** Values the schema accepts. */
  valid(schema: Schema): fc.Arbitrary<unknown>;
  /** Values the schema refuses, or null when the schema refuses nothing. */
  invalid(schema: Schema): fc.Arbitrary<Invalid> | null;
  /** The document's verdict on a value. */
  accepts: (schema: Schema, value: unknown) => boolean;
  resolve(schema: Schema): Schema;
}

export interface ArbitraryOptions {
  /** Replacement generators of valid values, keyed by $ref (e.g. "#/components/schemas/CallApiUrl"). */
  overrides?: Record<string, fc.Arbitrary<unknown>>;
}

const Ajv2020 = ((Ajv2020Module as unknown as { default?: unknown }).default ?? Ajv2020Module) as unknown as new (
  options: object,
) => {
  compile(schema: object): ((value: unknown) => boolean) & { errors?: unknown };
};
const addFormats = ((addFormatsModule as unknown as { default?: unknown }).default ?? addFormatsModule) as unknown as (
  ajv: object,
) => void;

/**
 * Short strings, mostly of the letters, digits and punctuation real clients send, sometimes of any
 * code point: values of the first kind get past the checks a server makes beyond the schema, so
 * the request reaches deeper. Long strings cost time and find nothing more.
 */
const text = (minLength = 0, maxLength = 24) =>
  fc.oneof(
    {
      weight: 3,
      arbitrary: fc.string({
        unit: fc.constantFrom(...'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.'.split('')),
        minLength,
        maxLength,
      }),
    },
    { weight: 1, arbitrary: fc.string({ unit: 'binary', minLength, maxLength }) },
  );

/** An optional property is left out more often than not: fewer properties, fewer ways to collide. */
const ABSENT = Symbol('absent');

export function schemaArbitraries(document: Record<string, any>, options: ArbitraryOptions = {}): SchemaArbitraries {
  const ajv = new Ajv2020({ strict: false, allErrors: false, validateFormats: true });
  addFormats(ajv);
  const components = document.components ?? {};
  const validators = new WeakMap<object, (value: unknown) => boolean>();
  const overrides = options.overrides ?? {};

  function accepts(schema: Schema, value: unknown): boolean {
    if (typeof schema === 'boolean') return schema;
    let validate = validators.get(schema);
    if (!validate) {
      // The components travel with each schema so that its "#/components/..." references resolve.
      validate = ajv.compile({ ...schema, components });
      validators.set(schema, validate);
    }
    return validate(value);
  }

  function resolve(schema: Schema): Schema {
    let current = schema;
    for (let hops = 0; typeof current === 'object' && typeof current.$ref === 'string'; hops++) {
      if (hops > 20) throw new Error(`reference loop at ${current.$ref}`);
      const pointer: string = current.$ref;
      if (!pointer.startsWith('#/')) throw new Error(`only local references are supported: ${pointer}`);
      const target = pointer
        .slice(2)
        .split('/')
        .map((part) => part.replace(/~1/g, '/').replace(/~0/g, '~'))
        .reduce((node: any, part) => node?.[part], document);
      if (target === undefined) throw new Error(`unresolved reference ${pointer}`);
      // Keywords beside $ref (OpenAPI 3.1 allows them) apply as well.
      const siblings = { ...current };
      delete siblings.$ref;
      current = Object.keys(siblings).length > 0 ? { allOf: [target, siblings] } : target;
    }
    return current;
  }

  function typesOf(schema: Record<string, any>): JsonType[] {
    if (schema.type !== undefined) return (Array.isArray(schema.type) ? schema.type : [schema.type]) as JsonType[];
    if (schema.properties || schema.required || schema.additionalProperties !== undefined || schema.propertyNames)
      return ['object'];
    if (schema.items || schema.minItems !== undefined || schema.maxItems !== undefined) return ['array'];
    if (schema.minLength !== undefined || schema.maxLength !== undefined || schema.pattern || schema.format)
      return ['string'];
    if (['minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum'].some((k) => schema[k] !== undefined))
      return ['number'];
    return [];
  }

  /** allOf folded into one schema: enough for the document, where branches add keywords rather than contradict. */
  function merged(schema: Record<string, any>): Record<string, any> {
    if (!schema.allOf) return schema;
    const { allOf, ...rest } = schema;
    let result: Record<string, any> = { ...rest };
    for (const branch of allOf as Schema[]) {
      const part = merged(resolve(branch) as Record<string, any>);
      result = {
        ...result,
        ...part,
        properties: { ...(result.properties ?? {}), ...(part.properties ?? {}) },
        required: [...new Set([...(result.required ?? []), ...(part.required ?? [])])],
      };
    }
    if (Object.keys(result.properties).length === 0) delete result.properties;
    if (result.required.length === 0) delete result.required;
    return result;
  }

  /** Required-sets a `not` forbids: `not: {required}` or `not: {anyOf|oneOf: [{required}, ...]}`. */
  function forbiddenSets(not: Schema | undefined): string[][] {
    if (!not || typeof not !== 'object') return [];
    const schema = resolve(not) as Record<string, any>;
    if (Array.isArray(schema.required) && Object.keys(schema).every((k) => k === 'required' || k === 'description'))
      return [schema.required];
    const branches = schema.anyOf ?? schema.oneOf;
    if (!Array.isArray(branches)) return [];
    const sets = branches.map((branch: Schema) =>
      typeof branch === 'object' ? (resolve(branch) as Record<string, any>).required : undefined,
    );
    return sets.every(Array.isArray) ? (sets as string[][]) : [];
  }

  const instants = fc.date({
    min: new Date('1000-01-01T00:00:00Z'),
    max: new Date('9999-12-31T23:59:59Z'),
    noInvalidDate: true,
  });

  function stringArb(schema: Record<string, any>): fc.Arbitrary<string> {
    const min: number = schema.minLength ?? 0;
    const max: number = Math.min(schema.maxLength ?? min + 24, min + 24);
    if (schema.format === 'uuid') return fc.uuid();
    if (schema.format === 'uri')
      return fc.webUrl().filter((url) => url.length >= min && url.length <= (schema.maxLength ?? Infinity));
    // RFC 3339 writes a four-digit year: instants of years 1000 to 9999.
    if (schema.format === 'date-time') return instants.map((date) => date.toISOString());
    if (schema.format === 'date') return instants.map((date) => date.toISOString().slice(0, 10));
    if (schema.pattern) {
      const pattern = new RegExp(schema.pattern, 'u');
      return fc
        .stringMatching(pattern)
        .filter((value) => value.length >= min && value.length <= (schema.maxLength ?? Infinity));
    }
    return text(min, max);
  }

  function numberArb(schema: Record<string, any>, integer: boolean): fc.Arbitrary<number> {
    const low = schema.exclusiveMinimum ?? schema.minimum;
    const high = schema.exclusiveMaximum ?? schema.maximum;
    const minExcluded = schema.exclusiveMinimum !== undefined;
    const maxExcluded = schema.exclusiveMaximum !== undefined;
    if (integer) {
      const min = low === undefined ? -1_000_000 : Math.ceil(low) + (minExcluded && Number.isInteger(low) ? 1 : 0);
      const max = high === undefined ? 1_000_000 : Math.floor(high) - (maxExcluded && Number.isInteger(high) ? 1 : 0);
      return fc.integer({ min, max: Math.max(min, max) });
    }
    const min = low ?? -1e9;
    const max = high ?? 1e9;
    return fc.oneof(
      fc
        .integer({ min: Math.ceil(min), max: Math.floor(max) })
        .filter((n) => (!minExcluded || n > min) && (!maxExcluded || n < max)),
      fc
        .double({ min, max, minExcluded, maxExcluded, noNaN: true, noDefaultInfinity: true })
        .map((n) => (Object.is(n, -0) ? 0 : n)),
    );
  }

  function objectArb(schema: Record<string, any>, depth: number): fc.Arbitrary<Record<string, unknown>> {
    const properties: Record<string, Schema> = schema.properties ?? {};
    const required: string[] = schema.required ?? [];
    const model: Record<string, fc.Arbitrary<unknown>> = {};
    for (const [name, property] of Object.entries(properties)) {
      const arb = validAt(property, depth + 1);
      model[name] = required.includes(name)
        ? arb
        : fc.oneof({ weight: 2, arbitrary: fc.constant(ABSENT) }, { weight: 1, arbitrary: arb });
    }
    for (const name of required) model[name] ??= fc.jsonValue({ maxDepth: 1 });
    const declared = fc
      .record(model)
      .map((record) => Object.fromEntries(Object.entries(record).filter(([, value]) => value !== ABSENT)));
    const additional = schema.additionalProperties;
    if (additional === false || (additional === undefined && Object.keys(properties).length > 0)) return declared;
    const keyArb = schema.propertyNames
      ? (validAt(schema.propertyNames, depth + 1) as fc.Arbitrary<string>)
      : text(1, 12);
    const valueArb =
      additional === undefined || additional === true ? fc.jsonValue({ maxDepth: 1 }) : validAt(additional, depth + 1);
    const extra = fc.dictionary(
      keyArb.filter((key) => !(key in properties) && key !== '__proto__'),
      valueArb,
      { maxKeys: 3 },
    );
    return fc.tuple(declared, extra).map(([own, more]) => ({ ...more, ...own }));
  }

  function arrayArb(schema: Record<string, any>, depth: number): fc.Arbitrary<unknown[]> {
    const minLength: number = schema.minItems ?? 0;
    const maxLength: number = Math.min(schema.maxItems ?? minLength + 3, minLength + 3);
    return fc.array(schema.items === undefined ? fc.jsonValue({ maxDepth: 1 }) : validAt(schema.items, depth + 1), {
      minLength,
      maxLength,
    });
  }

  function validAt(raw: Schema, depth = 0): fc.Arbitrary<unknown> {
    if (depth > 8) throw new Error('schema nesting too deep for the generator');
    if (raw === true) return fc.jsonValue({ maxDepth: 2 });
    if (raw === false) throw new Error('a false schema accepts nothing');
    if (typeof raw.$ref === 'string' && overrides[raw.$ref]) return overrides[raw.$ref]!;
    const schema = merged(resolve(raw) as Record<string, any>);
    let arb = validShape(schema, depth);
    const forbidden = forbiddenSets(schema.not);
    if (schema.not) arb = arb.filter((value) => !accepts(schema.not, value));
    else if (forbidden.length > 0)
      arb = arb.filter((value) => !forbidden.some((set) => isObject(value) && set.every((k) => k in value)));
    return arb;
  }

  function validShape(schema: Record<string, any>, depth: number): fc.Arbitrary<unknown> {
    if ('const' in schema) return fc.constant(schema.const);
    if (Array.isArray(schema.enum)) return fc.constantFrom(...schema.enum);
    const branches = schema.oneOf ?? schema.anyOf;
    if (Array.isArray(branches)) {
      const rest = { ...schema };
      delete rest.oneOf;
      delete rest.anyOf;
      const options = branches.map((branch: Schema) =>
        validAt(typeof branch === 'object' ? { allOf: [rest, branch] } : branch, depth + 1),
      );
      // oneOf: a value two branches accept is not valid, so the whole schema has the last word.
      return fc.oneof(...options).filter((value) => accepts(schema, value));
    }
    const types = typesOf(schema);
    if (types.length === 0) return fc.jsonValue({ maxDepth: 2 });
    return fc.oneof(
      ...types.map((type): fc.Arbitrary<unknown> => {
        switch (type) {
          case 'string':
            return stringArb(schema);
          case 'integer':
            return numberArb(schema, true);
          case 'number':
            return numberArb(schema, false);
          case 'boolean':
            return fc.boolean();
          case 'null':
            return fc.constant(null);
          case 'object':
            return objectArb(schema, depth);
          case 'array':
            return arrayArb(schema, depth);
        }
      }),
    );
  }

  /** One value of each JSON type the schema does not allow. */
  function wrongTypes(types: JsonType[]): unknown[] {
    const samples: Array<[JsonType, unknown]> = [
      ['string', 'not-a-number'],
      ['number', 42.5],
      ['integer', 7],
      ['boolean', true],
      ['null', null],
      ['object', { unexpected: 1 }],
      ['array', ['x']],
    ];
    const allowed = new Set(types);
    if (allowed.has('number')) allowed.add('integer');
    return samples.filter(([type]) => !allowed.has(type)).map(([, value]) => value);
  }

  function invalidAt(raw: Schema, depth = 0): fc.Arbitrary<Invalid> | null {
    if (depth > 8 || typeof raw === 'boolean')
      return raw === false ? fc.constant({ value: null, why: 'any value' }) : null;
    const schema = merged(resolve(raw) as Record<string, any>);
    const candidates: Array<fc.Arbitrary<Invalid>> = [];
    const add = (why: string, arb: fc.Arbitrary<unknown>) => candidates.push(arb.map((value) => ({ value, why })));

    const branches: Schema[] | undefined = schema.oneOf ?? schema.anyOf;
    let types = typesOf(schema);
    if (types.length === 0 && Array.isArray(branches)) {
      const branchTypes = branches.map((branch) => typesOf(merged(resolve(branch) as Record<string, any>)));
      if (branchTypes.every((list) => list.length > 0)) types = [...new Set(branchTypes.flat())];
    }
    if (types.length > 0 && types.length < JSON_TYPES.length)
      add(`not of type ${types.join(' or ')}`, fc.constantFrom(...wrongTypes(types)));
    if (Array.isArray(schema.enum)) {
      const strings = schema.enum.filter((v: unknown): v is string => typeof v === 'string');
      const near = strings.flatMap((v: string) => [v.toLowerCase(), v.toUpperCase(), `${v}-x`, ` ${v}`]);
      add(
        `not one of ${schema.enum.join(', ')}`,
        fc.constantFrom('UNKNOWN', '', ...near).filter((v) => !schema.enum.includes(v)),
      );
    }
    if ('const' in schema)
      add(
        `not ${JSON.stringify(schema.const)}`,
        fc.constant(typeof schema.const === 'string' ? `${schema.const}x` : 'other'),
      );
    if (types.includes('string') && !Array.isArray(schema.enum)) {
      if (schema.minLength > 0) add(`shorter than ${schema.minLength}`, fc.constant('x'.repeat(schema.minLength - 1)));
      if (schema.maxLength !== undefined) {
        // A too long URI keeps a host under .invalid: should it get through, it still goes nowhere.
        const base = schema.format === 'uri' ? 'http://target.invalid/' : '';
        add(
          `longer than ${schema.maxLength}`,
          fc
            .integer({ min: 1, max: 16 })
            .map((extra) => base + 'a'.repeat((schema.maxLength as number) + extra - base.length)),
        );
      }
      if (schema.pattern) {
        const pattern = new RegExp(schema.pattern, 'u');
        add(
          `not matching ${schema.pattern}`,
          text(1, 24).filter((value) => !pattern.test(value)),
        );
      }
      if (schema.format === 'uri')
        add(
          'not a URI',
          fc.constantFrom(
            'not a url',
            '//target.invalid/x',
            'target.invalid/path',
            '/relative/path',
            'http://target .invalid/',
            '',
          ),
        );
      if (schema.format === 'date-time')
        add(
          'not a date-time',
          fc.constantFrom('yesterday', '2026-13-01T00:00:00Z', '2026-01-01', '1700000000', '2026-01-01 25:00'),
        );
      if (schema.format === 'date')
        add('not a date', fc.constantFrom('2026-02-30', '26-01-01', 'today', '2026-1-1', '2026-01-01T00:00:00Z'));
      if (schema.format === 'uuid')
        add(
          'not a UUID',
          fc.constantFrom(
            'not-a-uuid',
            '1234',
            '0f8fad5b-d9cb-469f-a165-70867728950z',
            '0f8fad5bd9cb469fa16570867728950e1',
            'null',
          ),
        );
    }
    if (types.includes('number') || types.includes('integer')) {
      const only = types.includes('number') ? 'number' : 'integer';
      if (schema.minimum !== undefined)
        add(
          `below ${schema.minimum}`,
          fc.integer({ min: 1, max: 1000 }).map((d) => schema.minimum - d),
        );
      if (schema.maximum !== undefined)
        add(
          `above ${schema.maximum}`,
          fc.integer({ min: 1, max: 1000 }).map((d) => (schema.maximum as number) + d),
        );
      if (schema.exclusiveMinimum !== undefined)
        add(
          `not above ${schema.exclusiveMinimum}`,
          fc.constantFrom(schema.exclusiveMinimum, schema.exclusiveMinimum - 1),
        );
      if (schema.exclusiveMaximum !== undefined)
        add(
          `not below ${schema.exclusiveMaximum}`,
          fc.constantFrom(schema.exclusiveMaximum, (schema.exclusiveMaximum as number) + 1),
        );
      if (only === 'integer') add('not an integer', fc.constantFrom(1.5, 0.25, -2.75));
    }
    if (types.includes('object')) {
      // The rest of the object stays valid, so that each value breaks one thing only.
      const base = objectArb(schema, depth).filter((value) => !schema.not || !accepts(schema.not, value));
      // A JSON string that holds a valid object: a parser that looks inside strings would take it.
      if (!types.includes('string'))
        add(
          'a string holding JSON',
          base.map((value) => JSON.stringify(value)),
        );
      for (const name of schema.required ?? []) {
        add(
          `missing required "${name}"`,
          base.map((value) => Object.fromEntries(Object.entries(value).filter(([key]) => key !== name))),
        );
      }
      if (schema.additionalProperties === false) {
        add(
          'with an unknown property',
          fc
            .tuple(base, fc.constantFrom('unexpected', 'colour', 'apiUrl', 'extra_field'))
            .map(([value, key]) => ({ ...value, [key]: 1 })),
        );
      } else if (typeof schema.additionalProperties === 'object') {
        const bad = invalidAt(schema.additionalProperties, depth + 1);
        if (bad)
          candidates.push(
            fc.tuple(base, bad).map(([value, { value: inner, why }]) => ({
              value: { ...value, zz_extra: inner },
              why: `zz_extra ${why}`,
            })),
          );
      }
      for (const [name, property] of Object.entries<Schema>(schema.properties ?? {})) {
        const bad = invalidAt(property, depth + 1);
        if (bad)
          candidates.push(
            fc
              .tuple(base, bad)
              .map(([value, { value: inner, why }]) => ({ value: { ...value, [name]: inner }, why: `${name} ${why}` })),
          );
      }
      for (const set of forbiddenSets(schema.not)) {
        const widened = { ...schema, not: undefined, required: [...new Set([...(schema.required ?? []), ...set])] };
        add(`with ${set.join(' and ')} together`, objectArb(widened, depth));
      }
    }
    if (types.includes('array')) {
      if (schema.minItems > 0) add(`fewer than ${schema.minItems} items`, fc.constant([]));
      const bad = schema.items === undefined ? null : invalidAt(schema.items, depth + 1);
      if (bad)
        candidates.push(
          fc
            .tuple(arrayArb(schema, depth), bad)
            .map(([items, { value, why }]) => ({ value: [...items, value], why: `an item ${why}` })),
        );
    }
    if (candidates.length === 0) return null;
    return fc.oneof(...candidates).filter(({ value }) => !accepts(raw, value));
  }

  return { valid: (schema) => validAt(schema), invalid: (schema) => invalidAt(schema), accepts, resolve };
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
