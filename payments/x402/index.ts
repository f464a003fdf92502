/** The paying side of x402 version 1: wire types, 402 parsing, headers, and the choice of what to pay. */
export * from './types';
export * from './parse';
export * from './headers';
export * from './choose';
