import { spawn, type ChildProcess } from 'node:child_process';
import { eventually } from '../../../test/helpers/wait.js';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { aFeature, startTestApi } from '../../../test/helpers/api.js';
import { createTestDatabase, type TestDatabase } from '../../../test/helpers/db.js';
import { ConfigError } from '../../shared/config.js';
import { loadApiConfig } from '../src/config.js';

const repoRoot = join(import.meta.dirname, '../../..');

describe('configuration', () => {
  it('has the documented defaults', () => {
    const config = loadApiConfig({});
    expect(config).toMatchObject({ databaseUrl: undefined, port: 8080, production: false, rateLimit: { writesPerMinute: 600 } });
    expect(config.dataDir).toBe(join(process.cwd(), 'data'));
  });

  it.each([
    [{ PORT: 'eighty' }, 'PORT'],
    [{ PORT: '70000' }, 'PORT'],
    [{ DATABASE_URL: 'mysql://x' }, 'DATABASE_URL'],
    [{ AUTH_JWKS_URL: 'not a url' }, 'AUTH_JWKS_URL'],
    [{ NODE_ENV: 'staging' }, 'NODE_ENV'],
    [{ NODE_ENV: 'production', DATABASE_URL: 'postgres://db/x' }, 'AUTH_JWKS_URL'],
  ])('refuses %o naming %s', (env, variable) => {
    expect(() => loadApiConfig(env)).toThrow(ConfigError);
    expect(() => loadApiConfig(env)).toThrow(new RegExp(variable));
  });
});

/** `npm run api` as a real process. */
function startApiProcess(env: Record<string, string>): { child: ChildProcess; output: () => string; exited: Promise<number | null> } {
  const child = spawn(process.execPath, ['--import', 'tsx', 'services/api/src/server.ts'], {
    cwd: repoRoot,
    env: { PATH: process.env.PATH, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout!.on('data', (c: Buffer) => (output += c.toString()));
  child.stderr!.on('data', (c: Buffer) => (output += c.toString()));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return { child, output: () => output, exited };
}


// One database for the file: in PGlite mode every createTestDatabase of a worker is the same one.
let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.close();
});

describe('the API process', () => {
  let dataDir: string;
  beforeAll(() => {
    dataDir = mkdtempSync(join(tmpdir(), 'api-data-'));
  });
  afterAll(() => {
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('exits 2 naming the variable when the configuration is bad', async () => {
    const run = startApiProcess({ PORT: 'abc', DATA_DIR: dataDir });
    expect(await run.exited).toBe(2);
    expect(run.output()).toMatch(/configuration error: .*PORT/);
    const production = startApiProcess({ NODE_ENV: 'production', DATABASE_URL: db.url, DATA_DIR: dataDir });
    expect(await production.exited).toBe(2);
    expect(production.output()).toMatch(/AUTH_JWKS_URL/);
  });

  it('serves on DATABASE_URL, accepts a token from `npm run token`, and stops cleanly on SIGTERM', async () => {
    const run = startApiProcess({ PORT: '0', DATABASE_URL: db.url, DATA_DIR: dataDir, LOG_LEVEL: 'info' });
    try {
      const port = await eventually('the API to listen', () => /"port":(\d+),"database"/.exec(run.output())?.[1], 20_000);
      const base = `http://127.0.0.1:${port}`;
      expect((await fetch(`${base}/healthz`)).status).toBe(200);
      expect((await fetch(`${base}/readyz`)).status).toBe(200);

      const token = await new Promise<string>((resolve, reject) => {
        const cli = spawn(process.execPath, ['--import', 'tsx', 'services/api/src/auth/token-cli.ts', '--role', 'reviewer', '--sub', 'alice'], {
          cwd: repoRoot,
          env: { PATH: process.env.PATH, DATA_DIR: dataDir },
        });
        let out = '';
        cli.stdout.on('data', (c: Buffer) => (out += c.toString()));
        cli.on('exit', (code) => (code === 0 ? resolve(out.trim().split('\n').pop()!.trim()) : reject(new Error(`token exited ${code}`))));
      });
      const created = await fetch(`${base}/api/features`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        body: JSON.stringify(aFeature()),
      });
      expect(created.status).toBe(201);
      expect(((await created.json()) as { properties: { createdBy: string } }).properties.createdBy).toBe('alice');
    } finally {
      run.child.kill('SIGTERM');
    }
    expect(await run.exited).toBe(0);
    expect(run.output()).toContain('shutting down');
  });
});

describe('readiness and limits', () => {
  it('reports 503 on /readyz while migrations are pending', async () => {
    await db.reset({ migrate: false });
    const api = await startTestApi(db);
    try {
      const response = await api.request('GET', '/readyz');
      expect(response.status).toBe(503);
      expect(response.json.detail).toMatch(/pending 001_/);
    } finally {
      await api.close();
      await db.reset();
    }
  });

  it('limits changes per client and minute with 429 and Retry-After', async () => {
    const api = await startTestApi(db, { config: { rateLimit: { writesPerMinute: 2 } } });
    try {
      const token = await api.tokenFor('contributor', 'speedy');
      const statuses: number[] = [];
      for (let i = 0; i < 3; i++) statuses.push((await api.request('POST', '/api/features', { token, body: aFeature() })).status);
      expect(statuses).toEqual([201, 201, 429]);
      const limited = await api.request('POST', '/api/features', { token, body: aFeature() });
      expect(limited.json.code).toBe('TOO_MANY_REQUESTS');
      expect(limited.headers.get('retry-after')).toBe('60');
      // Reading is not limited.
      expect((await api.request('GET', '/api/features')).status).toBe(200);
    } finally {
      await api.close();
    }
  });
});
