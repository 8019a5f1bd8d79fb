import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ConfigError } from '../../services/shared/config.js';
import { HydraDouble } from '../../services/shared/testing/ory/hydra-double.js';
import { KratosDouble } from '../../services/shared/testing/ory/kratos-double.js';
import { lacks, requirements } from '../../test/helpers/requirements.js';
import { loadIdentityAppConfig } from '../src/app/config.js';
import { TestBrowser, type PageResult } from './browser.js';
import { COOKIE_SECRET } from './harness.js';

/**
 * The login limits across replicas (docs/identity.md "Rate limits and replicas", issue 30): two login
 * app processes (`identity/src/app/server.ts`, real HTTP, no proxy in front) on one PostgreSQL database,
 * as the role that owns only that database (as infra/jobs/identity-db-roles.sh makes it), the Kratos and
 * Hydra doubles behind them. Wrong passwords alternated between the two get 429 after exactly the limit
 * in total, on the login page and on the Kratos gate; with the counters in each process' memory the
 * same sequence would pass twice the limit.
 */

const ADMIN_URL = process.env.TEST_DATABASE_URL;
const MISSING = lacks(
  'the login limits across two login app processes',
  requirements.postgres('a PostgreSQL where a throwaway database and role can be made'),
  requirements.contracts(),
);

const PER_IP = 8;
const PER_ACCOUNT = 4;
const REPO = join(import.meta.dirname, '../..');
const NAME = `login_limits_${randomBytes(4).toString('hex')}`;
const ROLE_PASSWORD = randomBytes(12).toString('hex');

let admin: pg.Pool;
let counters: pg.Pool;
let kratos: KratosDouble;
const kratosOptions = { loginUiUrl: '', allowedReturnUrls: ['http://127.0.0.1:9'] };
let hydra: HydraDouble;
const replicas: { url: string; child: ChildProcess }[] = [];

/** server.ts as a child process on a free port; resolves with its URL once it logs that it listens. */
function startReplica(env: Record<string, string>): Promise<{ url: string; child: ChildProcess }> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'identity/src/app/server.ts'], { cwd: REPO, env: { PATH: process.env.PATH ?? '', ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  return new Promise((resolve, reject) => {
    let output = '';
    const read = (chunk: Buffer) => {
      output += chunk.toString();
      const match = /"port":(\d+),"loginLimits":"(\w+)"/.exec(output);
      if (!match) return;
      if (match[2] !== 'postgresql') reject(new Error(`the replica counts in ${match[2]}`));
      else resolve({ url: `http://127.0.0.1:${match[1]}`, child });
    };
    child.stdout!.on('data', read);
    child.stderr!.on('data', read);
    child.once('exit', (code) => reject(new Error(`login app exited with ${code}: ${output.slice(-2000)}`)));
  });
}

const stop = (child: ChildProcess) =>
  new Promise<void>((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve();
    child.once('exit', () => resolve());
    child.kill('SIGTERM');
  });

beforeAll(async () => {
  if (MISSING) return;
  admin = new pg.Pool({ connectionString: ADMIN_URL, max: 1 });
  // The login app's role as the roles job makes it: owns its database, nothing else, no rights to create more.
  await admin.query(`CREATE ROLE ${NAME} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD ${pg.escapeLiteral(ROLE_PASSWORD)}`);
  await admin.query(`CREATE DATABASE ${NAME} OWNER ${NAME}`);
  await admin.query(`REVOKE ALL ON DATABASE ${NAME} FROM PUBLIC`);
  const url = new URL(ADMIN_URL!);
  Object.assign(url, { username: NAME, password: ROLE_PASSWORD, pathname: `/${NAME}` });
  counters = new pg.Pool({ connectionString: url.toString(), max: 1 });
  // An idle client is cut by the DROP DATABASE … WITH (FORCE) of afterAll, which can land after the pool's end():
  // without a listener that is an unhandled error in whichever test file the worker runs next.
  counters.on('error', () => undefined);

  kratos = await new KratosDouble(kratosOptions).start();
  hydra = await new HydraDouble({ loginUrl: 'http://127.0.0.1:9/login', consentUrl: 'http://127.0.0.1:9/consent', logoutUrl: 'http://127.0.0.1:9/logout', postLogoutRedirect: 'http://127.0.0.1:9/' }).start();
  const env = {
    IDENTITY_PORT: '0',
    IDENTITY_AUTH_URL: 'http://127.0.0.1:9',
    IDENTITY_APP_URL: 'http://127.0.0.1:9/app',
    KRATOS_PUBLIC_URL: kratos.public.url,
    KRATOS_ADMIN_URL: kratos.admin.url,
    HYDRA_ADMIN_URL: hydra.admin.url,
    IDENTITY_COOKIE_SECRET: COOKIE_SECRET,
    IDENTITY_LOGIN_LIMIT_PER_IP: String(PER_IP),
    IDENTITY_LOGIN_LIMIT_PER_ACCOUNT: String(PER_ACCOUNT),
    IDENTITY_LOGIN_LIMIT_WINDOW_SECONDS: '600',
    LOGIN_DATABASE_URL: url.toString(),
    IDENTITY_REPLICAS: '2',
  };
  // Both at once, on a database without the table: each makes it at start, neither trips on the other.
  const started = await Promise.allSettled([startReplica(env), startReplica(env)]);
  for (const s of started) if (s.status === 'fulfilled') replicas.push(s.value);
  const failed = started.find((s) => s.status === 'rejected');
  if (failed) throw failed.reason;
  kratos.addIdentity({ email: 'ada@example.org', name: 'Ada', password: 'the-right-password-1' });
  // The double reads its options per request: its login UI is the first replica's page.
  kratosOptions.loginUiUrl = `${replicas[0]!.url}/self-service/login`;
}, 60_000);

afterAll(async () => {
  if (MISSING) return;
  await Promise.all(replicas.map((r) => stop(r.child)));
  await Promise.all([kratos?.close(), hydra?.close(), counters?.end()]);
  await admin.query(`DROP DATABASE IF EXISTS ${NAME} WITH (FORCE)`);
  await admin.query(`DROP ROLE IF EXISTS ${NAME}`);
  await admin.end();
});

// Every test starts from no counts (all requests come from 127.0.0.1: one address for the per-IP limit).
beforeEach(async () => {
  if (MISSING) return;
  await counters.query('DELETE FROM login.rate_limits');
});
afterEach(() => {
  if (MISSING) return;
  expect([...kratos.violations, ...hydra.violations]).toEqual([]);
});

const replica = (i: number) => replicas[i % replicas.length]!.url;

/** A browser login flow started at Kratos (a GET, never limited): its id and CSRF cookie. */
async function apiFlow(): Promise<{ id: string; cookie: string; csrf: string }> {
  const started = await fetch(`${kratos.public.url}/self-service/login/browser`, { redirect: 'manual' });
  await started.body?.cancel();
  const id = new URL(started.headers.get('location')!).searchParams.get('flow')!;
  const cookie = (started.headers.getSetCookie()[0] ?? '').split(';')[0]!;
  return { id, cookie, csrf: cookie.slice(cookie.indexOf('=') + 1) };
}

/** A password posted through replica i's Kratos gate (the path the proxy sends id.<domain>/self-service/ POSTs to). */
async function throughGate(i: number, identifier: string, password: string): Promise<number> {
  const flow = await apiFlow();
  const response = await fetch(`${replica(i)}/kratos-gate/self-service/login?flow=${flow.id}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json', cookie: flow.cookie },
    body: JSON.stringify({ method: 'password', identifier, password, csrf_token: flow.csrf }),
  });
  await response.body?.cancel();
  return response.status;
}

/** A password typed into the login page rendered by the first replica, and posted to replica i. */
async function throughLoginPage(i: number, identifier: string, password: string): Promise<number> {
  const browser = new TestBrowser();
  const page = await browser.go(`${kratos.public.url}/self-service/login/browser?return_to=${encodeURIComponent('http://127.0.0.1:9/app')}`);
  expect(page.url).toContain('/self-service/login?flow=');
  const onReplica: PageResult = { ...page, url: page.url.replace(replica(0), replica(i)) };
  return (await browser.submit(onReplica, '/self-service/login', { identifier, password })).status;
}

async function accountHits(): Promise<number[]> {
  const { rows } = await counters.query<{ hits: number }>(`SELECT hits FROM login.rate_limits WHERE key LIKE 'account:%'`);
  return rows.map((r) => r.hits);
}

describe.skipIf(MISSING)('the login limits with two login app processes on one database', () => {
  it('wrong passwords for one account on the login page, alternated between the replicas: 429 after exactly the per-account limit in total', async () => {
    const statuses: number[] = [];
    for (let i = 0; i < PER_ACCOUNT + 2; i++) statuses.push(await throughLoginPage(i, 'Ada@example.org', `guess ${i}`));
    expect(statuses).toEqual([...Array<number>(PER_ACCOUNT).fill(400), 429, 429]);
    // One row per account, keyed by a hash: no e-mail address in the table.
    const { rows } = await counters.query<{ key: string }>('SELECT key FROM login.rate_limits');
    expect(rows.map((r) => r.key).join('\n')).not.toMatch(/ada|example/i);
  });

  it("wrong passwords for one account through the Kratos gate, alternated: 429 after exactly the per-account limit; a right one on the other replica takes its own attempt back", async () => {
    const statuses: number[] = [];
    for (let i = 0; i < PER_ACCOUNT - 1; i++) statuses.push(await throughGate(i, 'ada@example.org', 'not-the-password'));
    // Kratos signs this one in: the per-account limit counts failures only, whichever replica saw them.
    statuses.push(await throughGate(PER_ACCOUNT - 1, 'ada@example.org', 'the-right-password-1'));
    await expect.poll(accountHits, { timeout: 5_000 }).toEqual([PER_ACCOUNT - 1]);
    for (let i = PER_ACCOUNT; i < PER_ACCOUNT + 3; i++) statuses.push(await throughGate(i, 'ada@example.org', 'not-the-password'));
    expect(statuses).toEqual([...Array<number>(PER_ACCOUNT - 1).fill(400), 200, 400, 429, 429]);
  });

  it('attempts for different accounts through the gate, alternated: 429 after exactly the per-address limit in total', async () => {
    const statuses: number[] = [];
    for (let i = 0; i < PER_IP + 2; i++) statuses.push(await throughGate(i, `someone-${i}@example.org`, 'x'));
    expect(statuses).toEqual([...Array<number>(PER_IP).fill(400), 429, 429]);
  });
});

describe('the login app told it runs as several replicas', () => {
  const base = { IDENTITY_AUTH_URL: 'https://auth.example.org', IDENTITY_APP_URL: 'https://app.example.org', KRATOS_PUBLIC_URL: 'https://id.example.org', KRATOS_ADMIN_URL: 'http://kratos-admin:4434', HYDRA_ADMIN_URL: 'http://hydra-admin:4445', IDENTITY_COOKIE_SECRET: COOKIE_SECRET };

  it('refuses to start without LOGIN_DATABASE_URL, naming it (each replica would grant the whole limit)', () => {
    expect(() => loadIdentityAppConfig({ ...base, IDENTITY_REPLICAS: '2' })).toThrow(ConfigError);
    expect(() => loadIdentityAppConfig({ ...base, IDENTITY_REPLICAS: '2' })).toThrow(/LOGIN_DATABASE_URL: required when IDENTITY_REPLICAS is 2/);
    expect(loadIdentityAppConfig({ ...base, IDENTITY_REPLICAS: '2', LOGIN_DATABASE_URL: 'postgres://login:pw@identity-db:5432/login' }).loginDatabaseUrl).toBe('postgres://login:pw@identity-db:5432/login');
    // One replica keeps its counts in memory, as before.
    expect(loadIdentityAppConfig(base).loginDatabaseUrl).toBeUndefined();
    expect(() => loadIdentityAppConfig({ ...base, LOGIN_DATABASE_URL: 'https://db.example.org/login' })).toThrow(/LOGIN_DATABASE_URL/);
  });
});
