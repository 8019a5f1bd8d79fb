import { createServer } from 'node:net';

/**
 * A free TCP port on 127.0.0.1 for a process that will bind it later (a fixture site, Caddy, a
 * container). It is drawn from below Linux's ephemeral range (32768–60999): a "listen on port 0"
 * elsewhere in the suite — every API and double does that — is handed ephemeral ports by the kernel,
 * so it can never take this port in the gap between our check and the real bind. Two callers drawing
 * the same port at once is left to chance (1 in 12 000) and to the bind check below.
 */
export async function freePort(): Promise<number> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const port = 20_000 + Math.floor(Math.random() * 12_000);
    if (await canBind(port)) return port;
  }
  throw new Error('no free port found below the ephemeral range');
}

function canBind(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}
