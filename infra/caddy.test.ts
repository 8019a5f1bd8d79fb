import { spawn, type ChildProcess } from 'node:child_process';
import { createServer as createHttpServer, request, type Server } from 'node:http';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { closeGracefully, listen } from '../services/shared/http-server.js';
import { renderCaddyfile, type ProxyRoute } from './caddy.js';
import { freePort } from '../test/helpers/ports.js';
import { lacks, requirements } from '../test/helpers/requirements.js';

const MISSING = lacks('the Caddyfile tests in a real Caddy', requirements.caddy());

/**
 * The rendered Caddyfile in a real Caddy on loopback (plain HTTP, driven by Host header): routing by
 * domain, and the 403 on /admin for clients outside the internal ranges. Loopback is "outside" in
 * one instance and "inside" in the other.
 */

let dir: string;
let upstream: Server;
let upstreamPort: number;
const caddies: ChildProcess[] = [];


async function startCaddy(name: string, internalCidrs: string[], routes: ProxyRoute[]): Promise<number> {
  const port = await freePort();
  const file = join(dir, `Caddyfile.${name}`);
  writeFileSync(file, renderCaddyfile({ acmeEmail: 'ops@example.org', internalCidrs, routes, plainHttpPort: port }));
  const caddy = spawn('caddy', ['run', '--config', file, '--adapter', 'caddyfile'], { stdio: 'ignore', env: { ...process.env, HOME: dir, XDG_DATA_HOME: dir, XDG_CONFIG_HOME: dir } });
  caddies.push(caddy);
  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline) {
    const ok = await get(port, 'nowhere.invalid', '/').then(() => true, () => false);
    if (ok) return port;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error('caddy did not start');
}

/** node:http, not fetch: fetch treats Host as a forbidden header and drops it. */
const get = (port: number, host: string, path: string) =>
  new Promise<{ status: number; body: string }>((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, headers: { host } }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (body += chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end();
  });

let outside: number;
let inside: number;

beforeAll(async () => {
  if (MISSING) return;
  dir = mkdtempSync(join(tmpdir(), 'infra-caddy-'));
  upstream = createHttpServer((req, res) => res.end(`upstream saw ${req.headers.host} ${req.url}`));
  upstreamPort = await listen(upstream, 0, '127.0.0.1');
  const routes: ProxyRoute[] = [
    { domain: 'api.example.org', upstream: `127.0.0.1:${upstreamPort}`, description: 'API' },
    { domain: 'geo.example.org', upstream: `127.0.0.1:${upstreamPort}`, internalOnlyPaths: ['/geoserver/rest*'], description: 'GeoServer' },
  ];
  outside = await startCaddy('outside', ['10.0.0.0/8', '192.168.0.0/16'], routes);
  inside = await startCaddy('inside', ['127.0.0.0/8', '10.0.0.0/8'], routes);
}, 30_000);

afterAll(async () => {
  if (MISSING) return;
  for (const caddy of caddies) caddy.kill('SIGTERM');
  await closeGracefully(upstream, 500);
  rmSync(dir, { recursive: true, force: true });
});

describe.skipIf(MISSING)('the rendered Caddyfile in a real Caddy', () => {
  it('routes each domain to its upstream', async () => {
    expect(await get(outside, 'api.example.org', '/features')).toEqual({ status: 200, body: 'upstream saw api.example.org /features' });
  });

  it('answers 403 to /admin from outside the internal ranges, without reaching the upstream', async () => {
    for (const path of ['/admin', '/admin/users', '/administrator']) {
      const response = await get(outside, 'api.example.org', path);
      expect(response.status, path).toBe(403);
      expect(response.body).not.toContain('upstream saw');
    }
    expect((await get(outside, 'geo.example.org', '/geoserver/rest/workspaces')).status).toBe(403);
    expect((await get(outside, 'geo.example.org', '/geoserver/wms')).status).toBe(200);
  });

  it('lets internal clients through to /admin', async () => {
    expect(await get(inside, 'api.example.org', '/admin/users')).toEqual({ status: 200, body: 'upstream saw api.example.org /admin/users' });
  });
});

describe('rendering', () => {
  it('refuses values that would change the Caddyfile structure', () => {
    const base = { acmeEmail: 'ops@example.org', internalCidrs: ['10.0.0.0/8'] };
    expect(() => renderCaddyfile({ ...base, routes: [{ domain: 'a.example.org {\n}', upstream: 'x:1', description: '' }] })).toThrow(/unsafe domain/);
    expect(() => renderCaddyfile({ ...base, routes: [{ domain: 'a.example.org', upstream: 'x:1 }', description: '' }] })).toThrow(/unsafe upstream/);
    expect(() => renderCaddyfile({ ...base, internalCidrs: ['0.0.0.0/0 }'], routes: [] })).toThrow(/unsafe CIDR/);
  });

  it('refuses the same domain twice', () => {
    const route = { domain: 'a.example.org', upstream: 'x:1', description: '' };
    expect(() => renderCaddyfile({ acmeEmail: 'ops@example.org', internalCidrs: ['10.0.0.0/8'], routes: [route, route] })).toThrow(/duplicate proxy domain/);
  });
});
