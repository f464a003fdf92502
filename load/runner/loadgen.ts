/**
 * Bench child: the load generator, pinned to its own core. The bench sends it runs over IPC:
 *
 * - autocannon: keep-alive load at full speed or at a fixed overall rate;
 * - clients: N clients of node:http, each one request at a time (closed loop) or paced to a fixed
 *   rate: used for POST 429s, which the service answers with Connection: close (autocannon would
 *   time the next request from before its reconnection);
 * - paid: paid calls, either direct with the unmodified x402-fetch client or through POST /proxy;
 * - open / close: idle keep-alive connections held open (for RSS figures).
 */
import { startAutocannon, type AutocannonRun } from './autocannon';
import { checker, type Check429, type CheckedResult } from './checks';
import { serveChild } from './children';
import { clientsRun, type ClientsRun } from './loadgen-clients';
import { closeConnections, openConnections } from './loadgen-connections';
import { paidRun, type PaidRun } from './loadgen-paid';

export type { CheckedResult } from './checks';
export type { ClientsResult } from './loadgen-clients';
export type { PaidResult } from './loadgen-paid';

/** How to end the runs under way early (the bench's `stop` call). */
const stoppers = new Set<() => void>();

async function autocannonRun(message: {
  run: Omit<AutocannonRun, 'onResponse'>;
  check429?: Check429;
}): Promise<CheckedResult> {
  const { state, inspect } = checker(message.check429);
  // autocannon hands over header names as the server wrote them; node:http's are lower case.
  const onResponse = (status: number, body: string, headers: Record<string, unknown>) =>
    inspect(
      status,
      body,
      Object.fromEntries(Object.entries(headers).map(([name, value]) => [name.toLowerCase(), value])),
    );
  const running = startAutocannon({ ...message.run, ...(message.check429 ? { onResponse } : {}) });
  stoppers.add(running.stop);
  try {
    const result = await running.done;
    return { ...result, checked429: state.checked, bad429: state.bad, bad429Samples: state.samples };
  } finally {
    stoppers.delete(running.stop);
  }
}

serveChild(
  {
    autocannon: (message: Parameters<typeof autocannonRun>[0]) => autocannonRun(message),
    clients: (message: { run: ClientsRun }) => clientsRun(message.run, stoppers),
    paid: (message: { run: PaidRun }) => paidRun(message.run),
    open: (message: Parameters<typeof openConnections>[0]) => openConnections(message),
    stop: () => {
      for (const stop of stoppers) stop();
      return { stopped: stoppers.size };
    },
    close: () => closeConnections(),
  },
  { pid: process.pid },
  () => {
    closeConnections();
  },
);
