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

const addFormats = ((addFormatsModule as unknown as { default?: typeof addFormatsModule }).default ??
  addFormatsModule) as unknown as (ajv: Ajv) => Ajv;

export const DOCUMENT_PATH = fileURLToPath(new URL('../openapi/dist/openapi.json', import.meta.url));

export function loadDocument(): Document & Record<string, unknown> {
  return JSON.parse(readFileSync(DOCUMENT_PATH, 'utf8'));
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

export async function createBackend(document: Document): Promise<OpenAPIBackend> {
  const api = new Backend({
    definition: structuredClone(document),
    strict: true,
    validate: true,
    quick: false,
    coerceTypes: true,
    ajvOpts: { allErrors: true, strict: true },
    customizeAjv: (ajv) => addFormats(ajv as unknown as Ajv) as unknown as typeof ajv,
  });
  await api.init();
  return api;
}

interface AjvLikeError {
  instancePath?: string;
  message?: string;
  keyword?: string;
  params?: Record<string, unknown>;
}

/** One line per problem: where it is and what is wrong, in words a client developer can act on. */
export function describeValidationErrors(errors: AjvLikeError[] | null | undefined): string {
  if (!errors || errors.length === 0) return 'the request does not match the interface';
  const lines = errors.map((error) => {
    const where = (error.instancePath ?? '').replace(/^\//, '').replace(/\//g, '.') || 'request';
    const params = error.params ?? {};
    let message = error.message ?? 'is invalid';
    if (error.keyword === 'additionalProperties' && params.additionalProperty) {
      message = `has an unknown property "${String(params.additionalProperty)}"`;
    } else if (error.keyword === 'enum' && Array.isArray(params.allowedValues)) {
      message = `must be one of ${params.allowedValues.join(', ')}`;
    } else if (error.keyword === 'required' && params.missingProperty) {
      message = `is missing the required property "${String(params.missingProperty)}"`;
    }
    return `${where} ${message}`;
  });
  return [...new Set(lines)].join('; ');
}
