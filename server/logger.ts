import { pino, type Logger } from 'pino';

/** How log lines are written: one JSON object a line, or a readable line for a person at a terminal. */
export type LogFormat = 'json' | 'pretty';

/** Where the lines go: standard output unless told (a test gives its own). */
export interface LogOutput {
  isTTY?: boolean;
  write(text: string): unknown;
}

const LEVEL_NAMES: Record<number, string> = {
  10: 'TRACE',
  20: 'DEBUG',
  30: 'INFO',
  40: 'WARN',
  50: 'ERROR',
  60: 'FATAL',
};

function fieldText(value: unknown): string {
  if (typeof value === 'string') return /[\s"=]/.test(value) ? JSON.stringify(value) : value;
  return JSON.stringify(value);
}

/**
 * One JSON line of pino as a person reads it: the time of day, the level, the message, then the
 * other fields as key=value (the service's name and pino's pid and hostname left out), and an
 * error's stack indented below it. A line that is not JSON is passed as it is.
 */
function readableLine(json: string): string {
  let record: Record<string, unknown>;
  try {
    record = JSON.parse(json) as Record<string, unknown>;
  } catch {
    return json;
  }
  const { level, time, msg, err, ...others } = record;
  const fields = Object.fromEntries(
    Object.entries(others).filter(([key]) => key !== 'service' && key !== 'pid' && key !== 'hostname'),
  );
  const clock = typeof time === 'number' ? new Date(time).toISOString().slice(11, 23) : '';
  const label = (typeof level === 'number' ? LEVEL_NAMES[level] : undefined) ?? String(level);
  const rest = Object.entries(fields).map(([key, value]) => `${key}=${fieldText(value)}`);
  const error = err as { message?: unknown; stack?: unknown } | undefined;
  const stack = typeof error?.stack === 'string' ? error.stack : undefined;
  if (error && stack === undefined) rest.push(`err=${fieldText(error.message ?? error)}`);
  const head = [clock, label.padEnd(5), typeof msg === 'string' ? msg : '', ...rest].filter(Boolean).join(' ');
  const tail = stack === undefined ? '' : `\n${stack.replace(/^/gm, '    ')}`;
  return `${head}${tail}\n`;
}

/**
 * The service's logger. LOG_FORMAT chooses the lines; unset, they are readable on a terminal (a
 * TTY) and JSON anywhere else (a file, a pipe, a collector).
 */
export function createLogger(level: string, format?: LogFormat, output: LogOutput = process.stdout): Logger {
  const readable = (format ?? (output.isTTY === true ? 'pretty' : 'json')) === 'pretty';
  const options = {
    level,
    base: { service: 'payment-routing-service' },
    redact: {
      paths: [
        'req.headers["x-api-key"]',
        'req.headers["x-payment"]',
        'req.headers.authorization',
        '*.privateKey',
        '*.apiKey',
      ],
      censor: '[redacted]',
    },
  };
  // JSON to standard output goes through pino's own destination, as it always has.
  if (!readable && output === process.stdout) return pino(options);
  return pino(options, { write: (line: string) => output.write(readable ? readableLine(line) : line) });
}
