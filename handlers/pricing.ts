import type { components } from '../codegen/api';
import type { Pricing } from '../payments/accounts/fees';
import { microToUsdc } from '../payments/basics/money';

/** A dry run's `pricing` (openapi Pricing): amounts in USDC, credits as a number. */
export function pricingBody(pricing: Pricing): components['schemas']['Pricing'] {
  return {
    scheme: pricing.scheme,
    ...(pricing.maxTargetMicro === undefined ? {} : { maxTargetAmount: microToUsdc(pricing.maxTargetMicro) }),
    ...(pricing.maxTotalMicro === undefined ? {} : { maxTotalAmount: microToUsdc(pricing.maxTotalMicro) }),
    ...(pricing.maxTotalCredits === undefined ? {} : { maxTotalCredits: Number(pricing.maxTotalCredits) }),
    rule: pricing.rule,
  };
}
