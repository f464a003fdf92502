/**
 * The usage console (GET /console): one HTML page with its style and script inline, read from
 * server/console/ at start. Nothing is built and nothing is loaded from elsewhere: the
 * Content-Security-Policy allows exactly this script and this style (by their SHA-256) and
 * requests to this service, which the script makes with the key the user pastes.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';

// Resolved from this module's folder: server/ here, dist/ in the build; both sit one level below the root.
const FOLDER = new URL('../server/console/', import.meta.url);

function sha256(text: string): string {
  return `'sha256-${createHash('sha256').update(text, 'utf8').digest('base64')}'`;
}

/** The page with its placeholder replaced; a page without it would run under a policy that blocks it, so it stops the start. */
function fill(html: string, placeholder: RegExp, content: string): string {
  if (!placeholder.test(html)) throw new Error(`server/console/console.html has no placeholder ${placeholder.source}`);
  return html.replace(placeholder, () => content);
}

export interface ConsolePage {
  html: string;
  contentSecurityPolicy: string;
}

export function loadConsolePage(): ConsolePage {
  const read = (name: string) => readFileSync(new URL(name, FOLDER), 'utf8');
  const style = read('console.css');
  const script = read('console.js');
  const html = fill(
    fill(read('console.html'), /<style>\s*\/\*STYLE\*\/\s*<\/style>/, `<style>${style}</style>`),
    /<script>\s*\/\*SCRIPT\*\/\s*<\/script>/,
    `<script>${script}</script>`,
  );
  const contentSecurityPolicy = [
    "default-src 'none'",
    `script-src ${sha256(script)}`,
    `style-src ${sha256(style)}`,
    "connect-src 'self'",
    'img-src data:',
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
  ].join('; ');
  return { html, contentSecurityPolicy };
}
