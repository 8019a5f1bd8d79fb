import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startIdentityStack, type IdentityStack } from '../../identity/test/harness.js';
import { lacks, requirements } from '../helpers/requirements.js';
import type { ProxyRoute } from '../../infra/caddy.js';
import { CaddyRunner, EXAMPLE_DOMAINS, send as sendTo, type Answer } from '../../infra/testing/caddy-runner.js';
import { proxyRoutes } from '../../infra/routes.js';

const MISSING = lacks('the Kratos gate tests in a real Caddy', requirements.caddy(), requirements.contracts());

/**
 * Login rate limiting covers Kratos' own public path, not only the login app's page: the stack's route
 * for `id.<domain>` (infra/routes.ts) in a real Caddy on loopback, Kratos the contract-checked double,
 * the real login app as the gate (identity/src/app/kratos-gate.ts). Before, the limits lived only on
 * the login app's page, and a client posting wrong passwords straight to Kratos' self-service login
 * through the proxy was never stopped.
 */

const DOMAINS = EXAMPLE_DOMAINS;
const PER_IP = 12;
const PER_ACCOUNT = 3;

const caddy = new CaddyRunner();
let proxyPort: number;
let identity: IdentityStack;

const send = (method: string, path: string, headers: Record<string, string> = {}, body?: string): Promise<Answer> => sendTo(proxyPort, method, DOMAINS.kratos, path, headers, body);

interface Flow {
  id: string;
  cookie: string;
  csrf: string;
}

/** A browser login flow started through the proxy (a GET: Kratos' own, not gated): its id and CSRF cookie. */
async function loginFlow(): Promise<Flow> {
  const started = await send('GET', '/self-service/login/browser');
  expect(started.status, started.body).toBe(303);
  const id = new URL(String(started.headers.location)).searchParams.get('flow')!;
  const cookie = ([started.headers['set-cookie'] ?? []].flat()[0] ?? '').split(';')[0]!;
  return { id, cookie, csrf: cookie.slice(cookie.indexOf('=') + 1) };
}

/** A wrong password posted straight to Kratos' self-service login (JSON, as a script or an app would). */
const wrongPassword = (flow: Flow, identifier: string) =>
  send(
    'POST',
    `/self-service/login?flow=${flow.id}`,
    { 'content-type': 'application/json', accept: 'application/json', cookie: flow.cookie },
    JSON.stringify({ method: 'password', identifier, password: 'not-the-password', csrf_token: flow.csrf }),
  );

beforeAll(async () => {
  if (MISSING) return;
  identity = await startIdentityStack({ loginLimit: { perIp: PER_IP, perAccount: PER_ACCOUNT, windowMs: 60_000 } });
  identity.kratos.addIdentity({ email: 'ada@example.org', name: 'Ada', password: 'the-right-password-1' });
  const kratos = proxyRoutes(DOMAINS, [], { selfServiceUi: false }).find((r) => r.domain === DOMAINS.kratos);
  if (!kratos?.gate) throw new Error('the stack\'s Kratos route has no gate');
  const hostPort = (url: string) => new URL(url).host;
  const routes: ProxyRoute[] = [{ ...kratos, upstream: hostPort(identity.kratos.public.url), gate: { ...kratos.gate, upstream: hostPort(identity.appUrl) } }];
  proxyPort = await caddy.start(['10.0.0.0/8'], routes);
}, 60_000);

afterAll(async () => {
  if (MISSING) return;
  caddy.stopAll();
  await identity?.close();
});

describe.skipIf(MISSING)("Kratos' public self-service path behind the proxy", () => {
  it("the right password signs in through the gate: Kratos' answer and its session cookie come back unchanged", async () => {
    const flow = await loginFlow();
    const answer = await send(
      'POST',
      `/self-service/login?flow=${flow.id}`,
      { 'content-type': 'application/json', accept: 'application/json', cookie: flow.cookie },
      JSON.stringify({ method: 'password', identifier: 'ada@example.org', password: 'the-right-password-1', csrf_token: flow.csrf }),
    );
    expect(answer.status, answer.body).toBe(200);
    expect([answer.headers['set-cookie'] ?? []].flat().some((c) => c.startsWith('ory_kratos_session='))).toBe(true);
  });

  it('failed logins for one account sent straight to Kratos get 429 after the per-account limit', async () => {
    const flow = await loginFlow();
    const statuses: number[] = [];
    for (let i = 0; i < PER_ACCOUNT + 2; i++) statuses.push((await wrongPassword(flow, 'ada@example.org')).status);
    expect(statuses.slice(0, PER_ACCOUNT)).toEqual(Array(PER_ACCOUNT).fill(400)); // Kratos' own answer: wrong credentials
    expect(statuses.slice(PER_ACCOUNT)).toEqual([429, 429]);
  });

  it('50 wrong passwords for different accounts from one address get 429 once the per-address limit is reached, and Kratos sees no more of them', async () => {
    const flow = await loginFlow();
    const answers: Answer[] = [];
    for (let i = 0; i < 50; i++) answers.push(await wrongPassword(flow, `guess-${i}@example.org`));
    const limited = answers.findIndex((a) => a.status === 429);
    // The address has spent one flow start and the first test's attempts already; the limit holds from there on.
    expect(limited).toBeGreaterThan(0);
    expect(limited).toBeLessThanOrEqual(PER_IP);
    expect(answers.slice(limited).every((a) => a.status === 429)).toBe(true);
    expect(answers[limited]!.headers['retry-after']).toBeDefined();
  });

  it('the gate passes on a path in plain form only (asked directly, past the proxy): an encoded or dot segment is a 400 that never reaches Kratos', async () => {
    const appPort = Number(new URL(identity.appUrl).port);
    const before = identity.kratos.violations.length;
    for (const path of ['/kratos-gate/self-service/%2e%2e/sessions/whoami', '/kratos-gate/self-service/../admin/identities', '/kratos-gate/self-service//login', '/kratos-gate/self-service/login;x']) {
      const answer = await sendTo(appPort, 'POST', '127.0.0.1', path, { 'content-type': 'application/json' }, '{}');
      expect({ status: answer.status, body: answer.body }, path).toEqual({ status: 400, body: 'Bad Request: the path must be in plain form' });
    }
    expect(identity.kratos.violations.length).toBe(before);
  });

  it('starting a flow stays Kratos\' own (GETs are not gated, and the exhausted address may still start one); every exchange was on contract', async () => {
    expect((await send('GET', '/self-service/login/browser')).status).toBe(303);
    expect(identity.kratos.violations).toEqual([]);
  });

});
