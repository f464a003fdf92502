/**
 * The facilitator's view of our credentials, checked once at start (a /settle refused with 401 or
 * 403 later, a key revoked or rotated, is counted in prs_facilitator_credentials_refused_total).
 */
import type { Logger } from 'pino';
import { ConfigError, type Config } from '../payments/basics/config';
import { facilitatorAccess, facilitatorRefusalAdvice } from '../payments/incoming/facilitator';

/** The longest the start waits for the facilitator's GET /supported. */
const START_FACILITATOR_TIMEOUT_MS = 5_000;

/**
 * When a facilitator is configured, one GET /supported with our credentials: a 401 or 403 stops
 * the start with the ConfigError naming the variables to fix (never their values). A facilitator
 * that does not answer does not stop it (the chain decides every settlement): it is logged.
 */
export async function checkFacilitatorCredentials(
  config: Pick<Config, 'facilitatorUrl' | 'facilitatorAuth'>,
  log: Logger,
): Promise<void> {
  const { facilitatorUrl, facilitatorAuth: auth } = config;
  if (!facilitatorUrl) return;
  const access = await facilitatorAccess(facilitatorUrl, { timeoutMs: START_FACILITATOR_TIMEOUT_MS, auth });
  if (access.kind === 'refused')
    throw new ConfigError(auth?.variables[0] ?? 'FACILITATOR_URL', facilitatorRefusalAdvice(auth, access.status));
  if (access.kind === 'unknown')
    log.warn(
      { details: access.details, authenticated: auth !== undefined },
      'the facilitator (FACILITATOR_URL) did not say whether it accepts us',
    );
  else if (auth) log.info({ credentials: auth.variables }, 'the facilitator accepts our credentials');
}
