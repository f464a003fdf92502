// The service's log lines: readable on a terminal, one JSON object a line anywhere else, unless
// LOG_FORMAT says which.
import { describe, expect, it } from 'vitest';
import { loadConfig, ConfigError } from '../../payments/basics/config';
import { createLogger } from '../../server/logger';

function output(isTTY: boolean) {
  const lines: string[] = [];
  return { isTTY, lines, write: (text: string) => lines.push(text) };
}

describe('the logger', () => {
  it('writes readable lines to a terminal: time, level, message, fields, and an error stack below', () => {
    const tty = output(true);
    const log = createLogger('info', undefined, tty);
    log.info({ network: 'base-sepolia', reason: 'no answer within 10 ms' }, 'the RPC did not answer');
    log.error({ err: new Error('boom') }, 'shutdown failed');
    log.debug('not at info');
    expect(tty.lines).toHaveLength(2);
    expect(tty.lines[0]).toMatch(
      /^\d\d:\d\d:\d\d\.\d{3} INFO {2}the RPC did not answer network=base-sepolia reason="no answer within 10 ms"\n$/,
    );
    expect(tty.lines[1]).toMatch(/^\d\d:\d\d:\d\d\.\d{3} ERROR shutdown failed\n {4}Error: boom\n {8}at /);
    expect(tty.lines.join('')).not.toContain('{"level"');
  });

  it('writes one JSON object a line elsewhere', () => {
    const pipe = output(false);
    createLogger('info', undefined, pipe).warn({ network: 'base' }, 'careful');
    expect(pipe.lines).toHaveLength(1);
    expect(JSON.parse(pipe.lines[0] ?? '')).toMatchObject({
      level: 40,
      msg: 'careful',
      network: 'base',
      service: 'payment-routing-service',
    });
  });

  it('follows LOG_FORMAT over the guess', () => {
    const tty = output(true);
    createLogger('info', loadConfig({ LOG_FORMAT: 'json' }).logFormat, tty).info('as JSON');
    expect(JSON.parse(tty.lines[0] ?? '')).toMatchObject({ msg: 'as JSON' });
    const pipe = output(false);
    createLogger('info', loadConfig({ LOG_FORMAT: 'pretty' }).logFormat, pipe).info('readable');
    expect(pipe.lines[0]).toMatch(/^\d\d:\d\d:\d\d\.\d{3} INFO {2}readable\n$/);
    expect(() => loadConfig({ LOG_FORMAT: 'xml' })).toThrow(ConfigError);
    expect(loadConfig({}).logFormat).toBeUndefined();
  });
});
