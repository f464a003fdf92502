/**
 * A readable reference page rendered from the bundled document at start, self-contained (no
 * scripts, fonts or styles from elsewhere): every operation with its parameters, body and
 * responses, then every schema.
 */

const METHODS = ['get', 'post', 'put', 'patch', 'delete'] as const;

/**
 * The parts of the document read here. The document is bundled from the one redocly lints; every
 * field is optional all the same, as a $ref object (a parameter or a response) has none of them.
 */
interface Schema {
  $ref?: string;
  oneOf?: Schema[];
  anyOf?: Schema[];
  allOf?: Schema[];
  type?: string | string[];
  items?: Schema;
  const?: unknown;
  enum?: unknown[];
  format?: string;
  pattern?: string;
  description?: string;
  properties?: Record<string, Schema>;
  required?: string[];
}

interface Parameter {
  name?: string;
  in?: string;
  required?: boolean;
  description?: string;
  schema?: Schema;
}

interface MediaType {
  schema?: Schema;
}

interface ResponseObject {
  description?: string;
  content?: Record<string, MediaType>;
  headers?: Record<string, unknown>;
}

interface Operation {
  operationId?: string;
  summary?: string;
  description?: string;
  deprecated?: boolean;
  parameters?: Parameter[];
  requestBody?: { content?: Record<string, MediaType> };
  responses?: Record<string, ResponseObject>;
  security?: unknown[];
}

type PathItem = Partial<Record<(typeof METHODS)[number], Operation>> & { parameters?: Parameter[] };

interface OpenApiDocument {
  info?: { title?: string; version?: string; description?: string };
  paths?: Record<string, PathItem>;
  components?: { schemas?: Record<string, Schema> };
}

function escapeHtml(text: string | string[] | undefined): string {
  return String(text ?? '')
    .replace(/&/g, '&amp;')
    .replace(/</g, '&lt;')
    .replace(/>/g, '&gt;')
    .replace(/"/g, '&quot;');
}

function refName(ref: string): string {
  return ref.split('/').pop() ?? ref;
}

function schemaSummary(schema: Schema | undefined): string {
  if (!schema) return '';
  if (schema.$ref) {
    const name = refName(schema.$ref);
    return `<a href="#schema-${escapeHtml(name)}">${escapeHtml(name)}</a>`;
  }
  for (const keyword of ['oneOf', 'anyOf', 'allOf'] as const) {
    const schemas = schema[keyword];
    if (Array.isArray(schemas)) return `${keyword}(${schemas.map(schemaSummary).join(', ')})`;
  }
  if (schema.type === 'array') return `array of ${schemaSummary(schema.items)}`;
  if (schema.const !== undefined) return `const ${escapeHtml(JSON.stringify(schema.const))}`;
  if (Array.isArray(schema.enum))
    return `${escapeHtml(schema.type ?? '')} enum: ${schema.enum.map((value: unknown) => escapeHtml(JSON.stringify(value))).join(', ')}`;
  const type = Array.isArray(schema.type) ? schema.type.join(' | ') : schema.type;
  return (
    escapeHtml(type ?? 'any') +
    (schema.format ? ` (${escapeHtml(schema.format)})` : '') +
    (schema.pattern ? ` pattern <code>${escapeHtml(schema.pattern)}</code>` : '')
  );
}

function propertiesTable(schema: Schema): string {
  const properties = schema.properties ?? {};
  const required = new Set<string>(schema.required ?? []);
  if (Object.keys(properties).length === 0) return '';
  const rows = Object.entries(properties)
    .map(
      ([name, property]) =>
        `<tr><td><code>${escapeHtml(name)}</code>${required.has(name) ? ' <b>required</b>' : ''}</td><td>${schemaSummary(property)}</td><td>${escapeHtml(property.description ?? '')}</td></tr>`,
    )
    .join('');
  return `<table><tr><th>field</th><th>type</th><th>meaning</th></tr>${rows}</table>`;
}

function renderOperation(path: string, method: string, operation: Operation, pathItem: PathItem): string {
  const parameters = [...(pathItem.parameters ?? []), ...(operation.parameters ?? [])];
  const parameterRows = parameters
    .map(
      (parameter) =>
        `<tr><td><code>${escapeHtml(parameter.name)}</code> (${escapeHtml(parameter.in)})${parameter.required ? ' <b>required</b>' : ''}</td><td>${schemaSummary(parameter.schema)}</td><td>${escapeHtml(parameter.description ?? '')}</td></tr>`,
    )
    .join('');
  const body = operation.requestBody?.content ?? {};
  const bodyRows = Object.entries(body)
    .map(([type, media]) => `<li><code>${escapeHtml(type)}</code>: ${schemaSummary(media.schema)}</li>`)
    .join('');
  const responses = Object.entries(operation.responses ?? {})
    .map(([status, response]) => {
      const content = Object.entries(response.content ?? {})
        .map(([type, media]) => `<code>${escapeHtml(type)}</code> ${schemaSummary(media.schema)}`)
        .join('; ');
      const headers = Object.keys(response.headers ?? {})
        .map((name) => `<code>${escapeHtml(name)}</code>`)
        .join(', ');
      return `<tr><td>${escapeHtml(status)}</td><td>${escapeHtml(response.description ?? '')}</td><td>${content}</td><td>${headers}</td></tr>`;
    })
    .join('');
  const security =
    (operation.security ?? []).length > 0 ? '<p class="auth">Requires the <code>x-api-key</code> header.</p>' : '';
  return `<section id="op-${escapeHtml(operation.operationId)}">
<h3><span class="method ${method}">${method.toUpperCase()}</span> <code>${escapeHtml(path)}</code>${operation.deprecated ? ' <em>(deprecated)</em>' : ''}</h3>
<p><b>${escapeHtml(operation.summary ?? '')}</b> <small>operationId <code>${escapeHtml(operation.operationId)}</code></small></p>
<div class="description">${escapeHtml(operation.description ?? '').replace(/\n/g, '<br>')}</div>${security}
${parameterRows ? `<h4>Parameters</h4><table><tr><th>name</th><th>type</th><th>meaning</th></tr>${parameterRows}</table>` : ''}
${bodyRows ? `<h4>Request body</h4><ul>${bodyRows}</ul>` : ''}
<h4>Responses</h4><table><tr><th>status</th><th>meaning</th><th>body</th><th>headers</th></tr>${responses}</table>
</section>`;
}

export function renderDocsPage(bundled: object): string {
  const document = bundled as OpenApiDocument;
  const info = document.info ?? {};
  const sections: string[] = [];
  const index: string[] = [];
  for (const [path, pathItem] of Object.entries(document.paths ?? {})) {
    for (const method of METHODS) {
      const operation = pathItem[method];
      if (!operation) continue;
      index.push(
        `<li><a href="#op-${escapeHtml(operation.operationId)}">${method.toUpperCase()} ${escapeHtml(path)}</a> ${escapeHtml(operation.summary ?? '')}</li>`,
      );
      sections.push(renderOperation(path, method, operation, pathItem));
    }
  }
  const schemas = Object.entries(document.components?.schemas ?? {})
    .map(
      ([name, schema]) =>
        `<section id="schema-${escapeHtml(name)}"><h3>${escapeHtml(name)}</h3><p>${escapeHtml(schema.description ?? '')}</p><p>${schemaSummary({ ...schema, description: undefined, properties: undefined })}</p>${propertiesTable(schema)}</section>`,
    )
    .join('');
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>${escapeHtml(info.title)} ${escapeHtml(info.version)}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font-family:system-ui,sans-serif;max-width:70rem;margin:2rem auto;padding:0 1rem;line-height:1.45;color:#1b1f24}
code{background:#f3f4f6;padding:0 .2rem;border-radius:3px}
table{border-collapse:collapse;width:100%;margin:.5rem 0}td,th{border:1px solid #d0d7de;padding:.3rem .5rem;text-align:left;vertical-align:top}
section{border-top:1px solid #d0d7de;padding-top:.5rem;margin-top:1.5rem}
.method{display:inline-block;min-width:4rem;text-align:center;color:#fff;border-radius:4px;padding:0 .3rem}
.get{background:#1f6feb}.post{background:#1a7f37}.put,.patch{background:#9a6700}.delete{background:#cf222e}
.auth{color:#9a6700}
</style></head><body>
<h1>${escapeHtml(info.title)} <small>${escapeHtml(info.version)}</small></h1>
<div>${escapeHtml(info.description ?? '').replace(/\n/g, '<br>')}</div>
<p>The machine-readable document is at <a href="/openapi.json">/openapi.json</a>.</p>
<h2>Operations</h2><ul>${index.join('')}</ul>
${sections.join('\n')}
<h2>Schemas</h2>${schemas}
</body></html>`;
}
