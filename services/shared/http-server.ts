import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';

/** Listen and resolve with the bound port (port 0 in tests picks a free one). */
export function listen(server: Server, port: number, host?: string): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve((server.address() as AddressInfo).port);
    });
  });
}

/**
 * Stop accepting connections, let in-flight requests finish, then close idle keep-alive sockets.
 * Anything still open after `graceMs` is cut so a stuck client cannot block shutdown forever.
 */
export function closeGracefully(server: Server, graceMs = 10_000): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => server.closeAllConnections(), graceMs);
    timer.unref();
    server.close(() => {
      clearTimeout(timer);
      resolve();
    });
    server.closeIdleConnections();
  });
}
