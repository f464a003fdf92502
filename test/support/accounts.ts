import type { Db } from '../../db/index';
import { createApiKey, createOrganisation, revokeApiKey } from '../../payments/accounts/accounts';
import { grantCredits } from '../../payments/accounts/credits';

export interface TestAccount {
  organisationId: bigint;
  accountId: bigint;
  accountPublicId: string;
  apiKeyId: bigint;
  key: string;
  prefix: string;
}

export async function createTestAccount(
  db: Db,
  options: { credits?: bigint; dailyCapCredits?: bigint } = {},
): Promise<TestAccount> {
  const organisation = await createOrganisation(db, 'Test organisation');
  const apiKey = await createApiKey(db, organisation.accountId, options.dailyCapCredits ?? 100_000n);
  if (options.credits) await grantCredits(db, organisation.organisationId, options.credits, 'test grant');
  return { ...organisation, ...apiKey };
}

export async function revokedKey(db: Db): Promise<string> {
  const account = await createTestAccount(db);
  await revokeApiKey(db, account.prefix);
  return account.key;
}
