/**
 * Stand-ins for a service that is still starting (the retry tests of the one-shot jobs): servers that
 * begin to listen on a port chosen up front (services/shared/testing/ports.ts freePort) only when the test says so,
 * each answering with its own handler or passing requests on to the real double behind it.
 */
import { createServer, request, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export class LateServers {
  private readonly servers: Server[] = [];

  /** Starts listening on 127.0.0.1:<port> (0: any); resolves with the port. */
  listen(handler: (req: IncomingMessage, res: ServerResponse) => void, port = 0): Promise<number> {
    const server = createServer(handler);
    this.servers.push(server);
    return new Promise((resolve) => server.listen(port, '127.0.0.1', () => resolve((server.address() as AddressInfo).port)));
  }

  async closeAll(): Promise<void> {
    await Promise.all(this.servers.splice(0).map((s) => new Promise((done) => s.close(done))));
  }
}

/** A handler that passes every request on to `base` (another server's origin) and its answer back. */
export function forwardTo(base: () => string): (req: IncomingMessage, res: ServerResponse) => void {
  return (req, res) => {
    const target = new URL(req.url ?? '/', base());
    const upstream = request(target, { method: req.method, headers: { ...req.headers, host: target.host } }, (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.headers);
      answer.pipe(res);
    });
    req.pipe(upstream);
  };
}
