/**
 * Stack traces of the built service point into the TypeScript sources, as under `npm start`.
 * `npm run serve` loads this first (`node --import=./dist/source-maps.js`), instead of Node's
 * --enable-source-maps, which reads and keeps the source map of every module it loads (viem and
 * other packages ship theirs) whether or not a trace is ever printed. Here only our own bundle's
 * maps (dist/*.js.map) are read, when a trace first needs one, and every other frame is printed as
 * Node prints it.
 */
import { readFileSync } from 'node:fs';
import { SourceMap, type SourceMapPayload } from 'node:module';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const distDir = path.dirname(fileURLToPath(import.meta.url));
const distUrl = pathToFileURL(distDir + path.sep).href;
const maps = new Map<string, SourceMap | null>();

function mapOf(fileUrl: string): SourceMap | null {
  let map = maps.get(fileUrl);
  if (map === undefined) {
    try {
      const file = fileURLToPath(fileUrl);
      map = new SourceMap(JSON.parse(readFileSync(`${file}.map`, 'utf8')) as SourceMapPayload);
    } catch {
      map = null;
    }
    maps.set(fileUrl, map);
  }
  return map;
}

/** A frame as Node prints it (a CallSite has its own toString, which the typings leave out). */
function asNodePrints(frame: NodeJS.CallSite): string {
  return (frame as unknown as { toString(): string }).toString();
}

/** One frame as Node prints it, with its place in the bundle replaced by the place in the source. */
function mappedFrame(frame: NodeJS.CallSite): string {
  const file = frame.getFileName();
  const line = frame.getLineNumber();
  const column = frame.getColumnNumber();
  if (!file?.startsWith(distUrl) || line === null || column === null) return asNodePrints(frame);
  const entry = mapOf(file)?.findEntry(line - 1, column - 1);
  if (!entry || !('originalSource' in entry)) return asNodePrints(frame);
  const original = entry.originalSource.startsWith('file:')
    ? fileURLToPath(entry.originalSource)
    : path.resolve(distDir, entry.originalSource);
  const source = path.relative(process.cwd(), original);
  const where = `${source}:${entry.originalLine + 1}:${entry.originalColumn + 1}`;
  const name = frame.getFunctionName() ?? frame.getMethodName();
  const prefix = frame.isAsync() ? 'async ' : frame.isConstructor() ? 'new ' : '';
  return name ? `${prefix}${name} (${where})` : `${prefix}${where}`;
}

Error.prepareStackTrace = (error: Error, frames: NodeJS.CallSite[]): string => {
  let head: string;
  try {
    head = Error.prototype.toString.call(error);
  } catch {
    head = '<error>';
  }
  return [head, ...frames.map((frame) => `    at ${mappedFrame(frame)}`)].join('\n');
};
