const MODULES = { k6: 'k6.mjs', 'k6/http': 'http.mjs', 'k6/metrics': 'metrics.mjs', 'k6/execution': 'execution.mjs' };

export async function resolve(specifier, context, next) {
  const file = MODULES[specifier];
  if (file) return { url: new URL(file, import.meta.url).href, shortCircuit: true };
  return next(specifier, context);
}
