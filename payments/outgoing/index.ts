/**
 * Payments we make, the target side of every paid mode: calling a target through the SSRF-safe client, reading its
 * 402, choosing and signing our payment, sending it, and reading the chain for it afterwards.
 * /proxy charges credits for it; /relay is paid for it by its client.
 */
export * from './call';
export * from './chain';
export * from './pay';
