// Listening on 127.0.0.1 with a free port, and closing without waiting for idle keep-alive sockets.
import type { RequestListener, Server } from 'node:http';
import { createServer } from 'node:http';

export interface RunningServer {
  url: string;
  close(): Promise<void>;
}

export async function listenLocally(handler: RequestListener): Promise<RunningServer> {
  const server: Server = createServer(handler);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const { port } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
