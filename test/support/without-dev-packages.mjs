// A Node module hook that makes unresolvable every package a production install (`npm ci
// --omit=dev`) leaves out: those the lock file marks as needed by development only (every
// devDependency of package.json and what only they pull in; a devDependency that a production
// package also depends on stays, as npm keeps it). Load it with `node --import <this file>`.
import { readFileSync } from 'node:fs';
import { register } from 'node:module';

const lock = JSON.parse(readFileSync(new URL('../../package-lock.json', import.meta.url), 'utf8'));
const devPackages = Object.entries(lock.packages ?? {})
  .filter(([where, entry]) => entry.dev === true && /^node_modules\/(@[^/]+\/)?[^/]+$/.test(where))
  .map(([where]) => where.slice('node_modules/'.length));

register(
  'data:text/javascript,' +
    encodeURIComponent(`
      import { isBuiltin } from 'node:module';
      const blocked = new Set(${JSON.stringify(devPackages)});
      const packageOf = (specifier) => {
        const parts = specifier.split('/');
        return specifier.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0];
      };
      export async function resolve(specifier, context, nextResolve) {
        if (!specifier.startsWith('.') && !specifier.startsWith('/') && !specifier.includes(':') && !isBuiltin(specifier) && blocked.has(packageOf(specifier))) {
          const error = new Error("Cannot find package '" + packageOf(specifier) + "' imported from " + context.parentURL);
          error.code = 'ERR_MODULE_NOT_FOUND';
          throw error;
        }
        return nextResolve(specifier, context);
      }
    `),
);
