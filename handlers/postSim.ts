import type { Handler } from './types';
import { simulateRelay } from './postRelaySim';

/** Deprecated alias of POST /relay/sim (docs/decisions.md): the same body, the same answers. */
export const postSim: Handler<'postSim'> = simulateRelay;
