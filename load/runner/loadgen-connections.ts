/** Idle keep-alive connections the load generator holds open (for RSS figures). */
import net from 'node:net';

const openSockets: net.Socket[] = [];

/** Opens `count` connections, each answered once (GET path) and then left open and idle. */
export async function openConnections(message: {
  baseUrl: string;
  count: number;
  path: string;
}): Promise<{ open: number; failed: number }> {
  const url = new URL(message.path, message.baseUrl);
  let failed = 0;
  const openOne = () =>
    new Promise<void>((resolve) => {
      const socket = net.connect(Number(url.port), url.hostname);
      let answered = false;
      socket.setTimeout(10_000, () => {
        if (answered) return;
        failed += 1;
        socket.destroy();
        resolve();
      });
      socket.once('error', () => {
        if (!answered) failed += 1;
        resolve();
      });
      socket.on('data', () => {
        if (answered) return;
        answered = true;
        socket.setTimeout(0);
        openSockets.push(socket);
        resolve();
      });
      socket.write(`GET ${url.pathname} HTTP/1.1\r\nHost: ${url.host}\r\nConnection: keep-alive\r\n\r\n`);
    });
  for (let start = 0; start < message.count; start += 50) {
    await Promise.all(Array.from({ length: Math.min(50, message.count - start) }, openOne));
  }
  return { open: openSockets.filter((socket) => !socket.destroyed).length, failed };
}

export function closeConnections(): { closed: number } {
  const closed = openSockets.length;
  for (const socket of openSockets.splice(0)) socket.destroy();
  return { closed };
}
