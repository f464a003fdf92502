/** The operator commands behind `npm run admin` (server/admin.ts), testable against any database. */
import { parseArgs } from 'node:util';
import type { Db } from '../db/index';
import { createApiKey, createOrganisation, revokeApiKey } from '../payments/accounts';
import { utcDay } from '../payments/clock';
import { grantCredits } from '../payments/credits';

export const USAGE = `Usage: npm run admin -- <command> [options]

Commands:
  create-org --name NAME                 create an organisation (with its default account)
  create-key --org ID [--daily-cap N]    create an API key for the organisation's account;
                                         the full key is printed once (daily cap in credits, default 100000)
  revoke-key --prefix PREFIX             revoke the API key with this prefix
  grant --org ID --credits N [--reference TEXT]
                                         add credits to an organisation (1 credit = 0.001 USDC)
  balances [--org ID]                    show balances, keys and today's spend
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
      },
      strict: true,
    });
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
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
          .select(['api_keys.prefix', 'api_keys.daily_cap_credits', 'api_keys.revoked_at', 'daily_spend.spent_credits'])
          .where('accounts.organisation_id', '=', organisation.id)
          .orderBy('api_keys.id')
          .execute();
        for (const key of keys) {
          const state = key.revoked_at ? 'revoked' : 'active';
          print(
            `  key ${key.prefix} (${state}): spent today ${key.spent_credits ?? 0n} of ${key.daily_cap_credits} credits`,
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
