/** The operator commands behind `npm run admin` (server/admin.ts), testable against any database. */
import { parseArgs } from 'node:util';
import type { Db } from '../db/index';
import { createApiKey, createOrganisation, revokeApiKey, setKeyPolicy } from '../payments/accounts/accounts';
import { utcDay } from '../payments/basics/clock';
import { grantCredits } from '../payments/accounts/credits';
import type { KeyPolicy } from '../payments/accounts/policy';

export const USAGE = `Usage: npm run admin -- <command> [options]

Commands:
  create-org --name NAME                 create an organisation (with its default account)
  create-key --org ID [--daily-cap N]    create an API key for the organisation's account;
                                         the full key is printed once (daily cap in credits, default 100000)
  revoke-key --prefix PREFIX             revoke the API key with this prefix
  set-policy --prefix PREFIX [--default-max N] [--hard-max N] [--hosts a.example,b.example:8443]
                                         set the key's policy on /proxy (replacing the one it had):
                                         the ceiling per call when a call names no max_amount, the
                                         most any call may pay (both in atomic units of USDC,
                                         1000000 = 1 USDC) and the target hosts it may call (host
                                         name suffixes, or exact host:port); an option left out
                                         is no rule
  grant --org ID --credits N [--reference TEXT]
                                         add credits to an organisation (1 credit = 0.001 USDC)
  balances [--org ID]                    show balances, keys and today's spend
  float [--stored]                       every enabled network's float (our wallet's stablecoin),
                                         gas, their floors, pending refunds and money held in
                                         channels; read from the chains now (--stored: the
                                         float job's last reading, no chain read)
`;

export class UsageError extends Error {}

function positiveBigint(value: string | undefined, name: string): bigint {
  if (value === undefined || !/^[0-9]+$/.test(value) || BigInt(value) <= 0n)
    throw new UsageError(`--${name} must be a positive whole number`);
  return BigInt(value);
}

function parseOptions(args: string[]) {
  try {
    return parseArgs({
      args,
      options: {
        name: { type: 'string' },
        org: { type: 'string' },
        'daily-cap': { type: 'string' },
        prefix: { type: 'string' },
        credits: { type: 'string' },
        reference: { type: 'string' },
        'default-max': { type: 'string' },
        'hard-max': { type: 'string' },
        hosts: { type: 'string' },
      },
      strict: true,
    });
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
}

const HOST_ENTRY = /^(?:[a-z0-9-]+\.)*[a-z0-9-]+(?::[0-9]{1,5})?$/;

function hostList(value: string): string[] {
  const hosts = value
    .split(',')
    .map((host) => host.trim().toLowerCase())
    .filter((host) => host !== '');
  if (hosts.length === 0 || hosts.length > 100) throw new UsageError('--hosts must list 1 to 100 hosts');
  const bad = hosts.find((host) => !HOST_ENTRY.test(host));
  if (bad !== undefined) throw new UsageError(`--hosts: "${bad}" is not a host name or host:port`);
  return hosts;
}

function describePolicy(policy: KeyPolicy): string {
  const rules = [
    policy.defaultMaxMicroUsdc === null ? undefined : `default max ${policy.defaultMaxMicroUsdc} per call`,
    policy.hardMaxMicroUsdc === null ? undefined : `hard max ${policy.hardMaxMicroUsdc} per call`,
    policy.allowedHosts === null ? undefined : `hosts ${policy.allowedHosts.join(', ')}`,
  ].filter((rule) => rule !== undefined);
  return rules.length === 0 ? 'no policy' : `policy: ${rules.join('; ')} (atomic units of USDC)`;
}

export async function runAdminCommand(db: Db, argv: string[], print: (line: string) => void): Promise<void> {
  const [command, ...rest] = argv;
  const { values } = parseOptions(rest);
  switch (command) {
    case 'create-org': {
      if (!values.name) throw new UsageError('create-org needs --name');
      const created = await createOrganisation(db, values.name);
      print(`organisation ${created.organisationId} created (account ${created.accountPublicId})`);
      return;
    }
    case 'create-key': {
      const organisationId = positiveBigint(values.org, 'org');
      const dailyCap = values['daily-cap'] === undefined ? 100_000n : positiveBigint(values['daily-cap'], 'daily-cap');
      const account = await db
        .selectFrom('accounts')
        .select('id')
        .where('organisation_id', '=', organisationId)
        .orderBy('id')
        .executeTakeFirst();
      if (!account) throw new UsageError(`no organisation ${organisationId}`);
      const { key, prefix } = await createApiKey(db, account.id, dailyCap);
      print(`API key ${prefix} created with a daily cap of ${dailyCap} credits. Store it now; it is not shown again:`);
      print(key);
      return;
    }
    case 'revoke-key': {
      if (!values.prefix) throw new UsageError('revoke-key needs --prefix');
      const revoked = await revokeApiKey(db, values.prefix);
      if (!revoked) throw new UsageError(`no active API key has the prefix ${values.prefix}`);
      print(`API key ${values.prefix} revoked`);
      return;
    }
    case 'set-policy': {
      if (!values.prefix) throw new UsageError('set-policy needs --prefix');
      const policy = {
        defaultMaxMicroUsdc:
          values['default-max'] === undefined ? null : positiveBigint(values['default-max'], 'default-max'),
        hardMaxMicroUsdc: values['hard-max'] === undefined ? null : positiveBigint(values['hard-max'], 'hard-max'),
        allowedHosts: values.hosts === undefined ? null : hostList(values.hosts),
      };
      if (!(await setKeyPolicy(db, values.prefix, policy)))
        throw new UsageError(`no active API key has the prefix ${values.prefix}`);
      print(`API key ${values.prefix}: ${describePolicy(policy)}`);
      return;
    }
    case 'grant': {
      const organisationId = positiveBigint(values.org, 'org');
      const credits = positiveBigint(values.credits, 'credits');
      let balance: bigint;
      try {
        balance = await grantCredits(
          db,
          organisationId,
          credits,
          values.reference ?? `admin grant ${new Date().toISOString()}`,
        );
      } catch (error) {
        if (error instanceof RangeError) throw new UsageError(error.message);
        throw error;
      }
      print(`granted ${credits} credits to organisation ${organisationId}; balance ${balance} credits`);
      return;
    }
    case 'balances': {
      let query = db.selectFrom('organisations').select(['id', 'name', 'credit_balance']).orderBy('id');
      if (values.org !== undefined) query = query.where('id', '=', positiveBigint(values.org, 'org'));
      const organisations = await query.execute();
      const day = utcDay(new Date());
      for (const organisation of organisations) {
        print(`organisation ${organisation.id} "${organisation.name}": ${organisation.credit_balance} credits`);
        const keys = await db
          .selectFrom('api_keys')
          .innerJoin('accounts', 'accounts.id', 'api_keys.account_id')
          .leftJoin('daily_spend', (join) =>
            join
              .on('daily_spend.scope', '=', 'api_key')
              .on('daily_spend.network_class', '=', 'all')
              .on('daily_spend.day', '=', day)
              .onRef('daily_spend.scope_id', '=', (eb) => eb.cast('api_keys.id', 'text')),
          )
          .select([
            'api_keys.prefix',
            'api_keys.daily_cap_credits',
            'api_keys.revoked_at',
            'api_keys.default_max_micro_usdc',
            'api_keys.hard_max_micro_usdc',
            'api_keys.allowed_hosts',
            'daily_spend.spent_credits',
          ])
          .where('accounts.organisation_id', '=', organisation.id)
          .orderBy('api_keys.id')
          .execute();
        for (const key of keys) {
          const state = key.revoked_at ? 'revoked' : 'active';
          print(
            `  key ${key.prefix} (${state}): spent today ${key.spent_credits ?? 0n} of ${key.daily_cap_credits} credits; ${describePolicy(
              {
                defaultMaxMicroUsdc: key.default_max_micro_usdc,
                hardMaxMicroUsdc: key.hard_max_micro_usdc,
                allowedHosts: key.allowed_hosts,
              },
            )}`,
          );
        }
      }
      if (organisations.length === 0) print('no organisations');
      return;
    }
    default:
      throw new UsageError(command ? `unknown command "${command}"` : 'no command given');
  }
}
