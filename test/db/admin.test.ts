import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../support/database';
import { runAdminCommand, UsageError } from '../../server/adminCommands';
import { authenticateKey } from '../../payments/accounts/accounts';

let database: TestDatabase;
beforeAll(async () => {
  database = await createTestDatabase();
});
afterAll(async () => {
  await database.drop();
});

async function run(...argv: string[]): Promise<string[]> {
  const lines: string[] = [];
  await runAdminCommand(database.handle.db, argv, (line) => lines.push(line));
  return lines;
}

describe('operator commands', () => {
  it('create an organisation, a key shown once, grant credits, show balances, revoke', async () => {
    const { db } = database.handle;
    const [created] = await run('create-org', '--name', 'Acme');
    const organisationId = /organisation (\d+) created/.exec(created!)![1]!;

    const keyLines = await run('create-key', '--org', organisationId, '--daily-cap', '5000');
    const key = keyLines[1]!;
    expect(key).toMatch(/^prs_[A-Za-z0-9]{10}_[A-Za-z0-9]{32}$/);
    const prefix = key.slice(0, 14);
    expect(keyLines[0]).toContain(prefix);
    // Only the hash (SHA-256) is stored, never the key.
    const stored = await db.selectFrom('api_keys').selectAll().executeTakeFirstOrThrow();
    expect(stored.key_hash.equals(createHash('sha256').update(key).digest())).toBe(true);
    expect(Object.values(stored).some((value) => String(value).includes(key.slice(15)))).toBe(false);
    expect(stored.daily_cap_credits).toBe(5000n);

    expect(await run('grant', '--org', organisationId, '--credits', '1500')).toEqual([
      `granted 1500 credits to organisation ${organisationId}; balance 1500 credits`,
    ]);
    const ledger = await db.selectFrom('credit_ledger').select(['kind', 'amount_credits']).execute();
    expect(ledger).toEqual([{ kind: 'grant', amount_credits: 1500n }]);

    const balances = await run('balances');
    expect(balances[0]).toBe(`organisation ${organisationId} "Acme": 1500 credits`);
    expect(balances[1]).toBe(`  key ${prefix} (active): spent today 0 of 5000 credits; no policy`);
    expect(balances.join('\n')).not.toContain(key);

    expect(
      await run(
        'set-policy',
        '--prefix',
        prefix,
        '--default-max',
        '50000',
        '--hard-max',
        '1000000',
        '--hosts',
        'Example.org,127.0.0.1:8080',
      ),
    ).toEqual([
      `API key ${prefix}: policy: default max 50000 per call; hard max 1000000 per call; hosts example.org, 127.0.0.1:8080 (atomic units of USDC)`,
    ]);
    const authenticated = await authenticateKey(db, key);
    expect(authenticated.ok && authenticated.key.policy).toEqual({
      defaultMaxMicroUsdc: 50_000n,
      hardMaxMicroUsdc: 1_000_000n,
      allowedHosts: ['example.org', '127.0.0.1:8080'],
    });
    expect((await run('balances'))[1]).toContain('hard max 1000000 per call');
    await expect(run('set-policy', '--prefix', prefix, '--hosts', 'http://x')).rejects.toThrow(UsageError);
    await expect(run('set-policy', '--prefix', 'prs_nothing000')).rejects.toThrow(UsageError);
    await run('set-policy', '--prefix', prefix);
    expect((await run('balances'))[1]).toContain('no policy');

    expect((await authenticateKey(db, key)).ok).toBe(true);
    await run('revoke-key', '--prefix', prefix);
    expect(await authenticateKey(db, key)).toEqual({ ok: false, reason: 'revoked' });
    expect((await run('balances'))[1]).toContain('(revoked)');
  });

  it('refuse wrong input with a usage error and change nothing', async () => {
    const { db } = database.handle;
    const before = await db.selectFrom('credit_ledger').select(db.fn.countAll().as('n')).executeTakeFirstOrThrow();
    await expect(run('grant', '--org', '1', '--credits', '-5')).rejects.toThrow(UsageError);
    await expect(run('grant', '--org', '999999', '--credits', '5')).rejects.toThrow(/no organisation/);
    await expect(run('create-key', '--org', '999999')).rejects.toThrow(/no organisation/);
    await expect(run('revoke-key', '--prefix', 'prs_nothing')).rejects.toThrow(UsageError);
    await expect(run('launch')).rejects.toThrow(/unknown command/);
    const after = await db.selectFrom('credit_ledger').select(db.fn.countAll().as('n')).executeTakeFirstOrThrow();
    expect(after.n).toEqual(before.n);
  });
});
