import type { Server } from 'node:http';
import { serveApp } from '../src/http/server.js';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { closeGracefully, listen } from '../../shared/http-server.js';
import { createTestDatabase, type TestDatabase } from '../../../test/helpers/db.js';
import { createApp } from '../src/app.js';
import { loadOrCreateDevKeys } from '../src/auth/dev-keys.js';
import { createAuthenticator } from '../src/auth/index.js';

/** POST /api/dev/token: the web app's development sign-in, present only where the development key is trusted. */
describe('the development token route', () => {
  let db: TestDatabase;
  let dataDir: string;
  const servers: Server[] = [];

  beforeAll(async () => {
    db = await createTestDatabase();
    dataDir = await mkdtemp(join(tmpdir(), 'dev-token-'));
  });
  afterAll(async () => {
    for (const server of servers) await closeGracefully(server, 1_000);
    await db?.close();
    await rm(dataDir, { recursive: true, force: true });
  });

  async function start(options: { withKeys: boolean; production: boolean }): Promise<string> {
    const authenticator = await createAuthenticator({ production: false, dataDir });
    const devKeys = options.withKeys ? await loadOrCreateDevKeys(dataDir) : undefined;
    const app = createApp({ db: db.pool, config: { rateLimit: { writesPerMinute: 0 } }, authenticator, logger: pino({ level: 'silent' }, pino.destination({ sync: true })), devKeys, production: options.production });
    const server = await serveApp(app);
    servers.push(server);
    return `http://127.0.0.1:${await listen(server, 0, '127.0.0.1')}`;
  }

  const ask = (url: string, body: unknown) => fetch(`${url}/api/dev/token`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

  it('hands a loopback caller a token for the chosen role that the API then accepts', async () => {
    const url = await start({ withKeys: true, production: false });
    const response = await ask(url, { role: 'contributor', sub: 'alice' });
    expect(response.status).toBe(200);
    expect(response.headers.get('cache-control')).toBe('no-store');
    const { token } = (await response.json()) as { token: string };
    const created = await fetch(`${url}/api/features`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ type: 'Feature', geometry: { type: 'Point', coordinates: [13.4, 52.5] }, properties: { name: 'Probe', kategorie: 'denkmal' } }),
    });
    expect(created.status).toBe(201);
    expect(((await created.json()) as { properties: { createdBy: string } }).properties.createdBy).toBe('alice');
  });

  it('is refused in production even when a development key is handed in', async () => {
    const url = await start({ withKeys: true, production: true });
    const response = await ask(url, { role: 'admin', sub: 'mallory' });
    expect(response.status).toBe(404);
    expect(response.headers.get('content-type')).toContain('application/problem+json');
    expect(await response.text()).not.toContain('token"');
  });

  it('does not exist where the API has no development key (a JWKS is configured)', async () => {
    const url = await start({ withKeys: false, production: false });
    expect((await ask(url, { role: 'admin', sub: 'mallory' })).status).toBe(404);
  });

  it('rejects an unknown role and a malformed user name with field errors', async () => {
    const url = await start({ withKeys: true, production: false });
    const response = await ask(url, { role: 'superuser', sub: '../etc' });
    expect(response.status).toBe(400);
    const problem = (await response.json()) as { fields: Array<{ field: string }> };
    expect(problem.fields.map((f) => f.field).sort()).toEqual(['role', 'sub']);
  });
});
