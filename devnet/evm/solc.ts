// solc-js (a dev dependency, run as wasm in this process: nothing is downloaded) compiling one of
// our Solidity sources the way every committed artifact is compiled: Cancun (it runs on every
// chain we target and on hardhat's default hardfork), optimizer on with 200 runs.
import { createHash } from 'node:crypto';
import { createRequire } from 'node:module';
import type { Abi, Hex } from 'viem';

export const EVM_VERSION = 'cancun';

export interface CompiledSource<Name extends string> {
  compiler: string;
  evmVersion: string;
  sourceSha256: string;
  /** Per contract: its ABI and its code (creation or runtime code, as asked). */
  contracts: Record<Name, { abi: Abi; code: Hex }>;
}

export function compileSolidity<Name extends string>(
  sourceName: string,
  source: string,
  contractNames: readonly Name[],
  code: 'bytecode' | 'deployedBytecode',
): CompiledSource<Name> {
  const require = createRequire(import.meta.url);
  const solc = require('solc') as { compile(input: string): string; version(): string };
  const input = {
    language: 'Solidity',
    sources: { [sourceName]: { content: source } },
    settings: {
      evmVersion: EVM_VERSION,
      optimizer: { enabled: true, runs: 200 },
      outputSelection: { '*': Object.fromEntries(contractNames.map((name) => [name, ['abi', `evm.${code}.object`]])) },
    },
  };
  const output = JSON.parse(solc.compile(JSON.stringify(input))) as {
    errors?: { severity: string; formattedMessage: string }[];
    contracts?: Record<string, Record<string, { abi: Abi; evm: Record<string, { object: string }> }>>;
  };
  const errors = (output.errors ?? []).filter((entry) => entry.severity === 'error');
  if (errors.length > 0) {
    throw new Error(`${sourceName} does not compile:\n${errors.map((entry) => entry.formattedMessage).join('\n')}`);
  }
  const contracts = {} as Record<Name, { abi: Abi; code: Hex }>;
  for (const name of contractNames) {
    const contract = output.contracts?.[sourceName]?.[name];
    const object = contract?.evm[code]?.object;
    if (!contract || object === undefined) throw new Error(`solc produced no ${name} contract`);
    contracts[name] = { abi: contract.abi, code: `0x${object}` };
  }
  return {
    compiler: `solc-js ${solc.version()}`,
    evmVersion: EVM_VERSION,
    sourceSha256: createHash('sha256').update(source).digest('hex'),
    contracts,
  };
}
