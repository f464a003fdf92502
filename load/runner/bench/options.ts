/** The options of `npm run bench` (documented at the top of load/runner/bench.ts). */
import { itemAt } from '../checked';
import { disablePinning } from '../children';

export const SECTIONS = [
  'pass',
  'config',
  'paid',
  'verify',
  'logging',
  'soak',
  'caps',
  'instances',
  'rss',
  'profile',
  'floor',
  'usage',
  'vouchers',
  'channel',
] as const;
export type Section = (typeof SECTIONS)[number];

export interface Options {
  rounds: number;
  durationS: number;
  warmupS: number;
  connections: number;
  paidCalls: number;
  overloadCap: number;
  soakS: number;
  logLevel: string;
  keep: boolean;
  json: string | undefined;
  sections: Set<Section>;
  /** Extra node flags for every service process (e.g. --max-semi-space-size=4). */
  nodeFlags: string[];
  /**
   * How the service runs: 'built' is production's way (`npm run build`, then node over dist/ as
   * `npm run serve` does), 'tsx' is `npm start`'s (TypeScript through tsx's loader).
   */
  runtime: 'built' | 'tsx';
}

export function parseOptions(argv: string[]): Options {
  const quick = argv.includes('--quick');
  const options: Options = {
    rounds: quick ? 2 : 3,
    durationS: quick ? 3 : 5,
    warmupS: quick ? 1 : 2,
    connections: 50,
    paidCalls: quick ? 25 : 60,
    overloadCap: 20,
    soakS: quick ? 0 : 30,
    logLevel: 'warn',
    keep: false,
    json: undefined,
    nodeFlags: [],
    runtime: 'built',
    sections: new Set(
      SECTIONS.filter((section) => section !== 'profile' && !(quick && (section === 'logging' || section === 'usage'))),
    ),
  };
  const number = (index: number, name: string, min: number) => {
    const value = Number(argv[index + 1]);
    if (!Number.isFinite(value) || value < min) throw new Error(`${name} takes a number of at least ${min}`);
    return value;
  };
  for (let index = 0; index < argv.length; index += 1) {
    const option = itemAt(argv, index, 'options');
    switch (option) {
      case '--quick':
        break;
      case '--rounds':
        options.rounds = number(index++, option, 1);
        break;
      case '--duration':
        options.durationS = number(index++, option, 1);
        break;
      case '--connections':
        options.connections = number(index++, option, 1);
        break;
      case '--paid-calls':
        options.paidCalls = number(index++, option, 1);
        break;
      case '--overload-cap':
        options.overloadCap = number(index++, option, 1);
        break;
      case '--soak':
        options.soakS = number(index++, option, 0);
        break;
      case '--log-level':
        options.logLevel = argv[++index] ?? 'warn';
        break;
      case '--profile':
        options.sections.add('profile');
        break;
      case '--only': {
        const wanted = (argv[++index] ?? '').split(',').filter(Boolean);
        if (wanted.length === 0 || wanted.some((section) => !(SECTIONS as readonly string[]).includes(section))) {
          throw new Error(`--only takes a comma list of ${SECTIONS.join(', ')}`);
        }
        options.sections = new Set(wanted as Section[]);
        break;
      }
      case '--node-flags':
        options.nodeFlags = (argv[++index] ?? '').split(' ').filter(Boolean);
        break;
      case '--tsx':
        options.runtime = 'tsx';
        break;
      case '--no-pin':
        disablePinning();
        break;
      case '--keep':
        options.keep = true;
        break;
      case '--json':
        options.json = argv[++index];
        break;
      default:
        throw new Error(`unknown option ${option} (see the top of load/runner/bench.ts)`);
    }
  }
  if (options.soakS === 0) options.sections.delete('soak');
  return options;
}
