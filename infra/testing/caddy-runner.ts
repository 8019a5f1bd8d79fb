/**
 * The rendered Caddyfile in a real Caddy on loopback, for the proxy tests (infra/caddy*.test.ts): plain
 * HTTP on a free port, driven by Host header, each instance in a folder of its own and stopped by
 * `stopAll`. Requests go through node:http, which sends the path exactly as given (fetch would
 * normalise it) and lets the test set Host (fetch drops it).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { request } from 'node:http';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { renderCaddyfile, type ProxyRoute } from '../caddy.js';
import { freePort } from '../../services/shared/testing/ports.js';

/** The example stack's public names (infra/Pulumi.example.yaml). */
export const EXAMPLE_DOMAINS = {
  api: 'api.example.org',
  geo: 'geo.example.org',
  auth: 'auth.example.org',
  accounts: 'accounts.example.org',
  kratos: 'id.example.org',
  hydra: 'oauth.example.org',
  webhook: 'hooks.example.org',
};

export interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

/** One request to 127.0.0.1:<port> with this Host and the path as written. */
export function send(port: number, method: string, host: string, path: string, headers: Record<string, string> = {}, body?: string): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, method, path, headers: { host, ...headers } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (text += chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

export class CaddyRunner {
  private readonly dir = mkdtempSync(join(tmpdir(), 'infra-caddy-'));
  private readonly caddies: ChildProcess[] = [];

  /** Starts Caddy with these routes; resolves with its port once it answers. */
  async start(internalCidrs: string[], routes: ProxyRoute[]): Promise<number> {
    const port = await freePort();
    const file = join(this.dir, `Caddyfile.${this.caddies.length}`);
    writeFileSync(file, renderCaddyfile({ acmeEmail: 'ops@example.org', internalCidrs, routes, plainHttpPort: port }));
    const caddy = spawn('caddy', ['run', '--config', file, '--adapter', 'caddyfile'], { stdio: 'ignore', env: { ...process.env, HOME: this.dir, XDG_DATA_HOME: this.dir, XDG_CONFIG_HOME: this.dir } });
    this.caddies.push(caddy);
    const deadline = Date.now() + 10_000;
    while (Date.now() < deadline) {
      if (await send(port, 'GET', 'nowhere.invalid', '/').then(() => true, () => false)) return port;
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error('caddy did not start');
  }

  stopAll(): void {
    for (const caddy of this.caddies) caddy.kill('SIGTERM');
    rmSync(this.dir, { recursive: true, force: true });
  }
}
