// A Node module hook that makes every devDependency of package.json unresolvable, as after a
// production install (`npm ci --omit=dev`). Load it with `node --import tsx --import <this file>`.
import { readFileSync } from 'node:fs';
import { register } from 'node:module';

const manifest = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8'));
const devPackages = Object.keys(manifest.devDependencies ?? {});

register(
  'data:text/javascript,' +
    encodeURIComponent(`
      const blocked = new Set(${JSON.stringify(devPackages)});
      const packageOf = (specifier) => {
        const parts = specifier.split('/');
        return specifier.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0];
      };
      export async function resolve(specifier, context, nextResolve) {
        if (!specifier.startsWith('.') && !specifier.startsWith('/') && !specifier.includes(':') && blocked.has(packageOf(specifier))) {
          const error = new Error("Cannot find package '" + packageOf(specifier) + "' imported from " + context.parentURL);
          error.code = 'ERR_MODULE_NOT_FOUND';
          throw error;
        }
        return nextResolve(specifier, context);
      }
    `),
);
