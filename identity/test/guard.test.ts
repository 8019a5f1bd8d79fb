import { createServer, type Server } from 'node:http';
import express from 'express';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { closeGracefully, listen } from '../../services/shared/http-server.js';
import { createRouteGuard } from '../../services/shared/ory/guard.js';
import { createOryClients } from '../../services/shared/ory/clients.js';
import { KratosDouble } from '../../services/shared/testing/ory/kratos-double.js';
import { lacks, requirements } from '../../test/helpers/requirements.js';

const MISSING = lacks('the identity tests on the Kratos/Hydra doubles', requirements.contracts());

/** The route guard on a real Express app, asking the Kratos double (contract-checked) who is calling. */

let kratos: KratosDouble;
let server: Server;
let url: string;
const LOGIN = 'https://auth.example.org/kratos/self-service/login/browser';

beforeAll(async () => {
  if (MISSING) return;
  kratos = await new KratosDouble({ loginUiUrl: 'https://auth.example.org/self-service/login', allowedReturnUrls: ['https://app.example.org'] }).start();
  const { frontend } = createOryClients({ kratosPublicUrl: kratos.public.url, kratosAdminUrl: kratos.admin.url, hydraAdminUrl: 'http://127.0.0.1:9' });
  const app = express();
  app.use('/editor', createRouteGuard({ frontend, loginUrl: LOGIN, publicBaseUrl: 'https://app.example.org' }), (_req, res) => {
    res.json(res.locals.identity);
  });
  server = createServer(app);
  url = `http://127.0.0.1:${await listen(server, 0, '127.0.0.1')}`;
});
afterAll(async () => {
  if (MISSING) return;
  await closeGracefully(server, 500);
  await kratos.close();
});
afterEach(() => {
  if (MISSING) return;
  expect(kratos.violations).toEqual([]);
});

describe.skipIf(MISSING)('route guard', () => {
  it('lets a logged-in user through with id, email, name and role', async () => {
    const user = kratos.addIdentity({ email: 'e@example.org', name: 'Editor', password: 'x', role: 'contributor' });
    const session = kratos.createSession(user.id);
    const response = await fetch(`${url}/editor/features?kind=denkmal`, { headers: { cookie: `theme=dark; ory_kratos_session=${session.token}` } });
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual({ id: user.id, role: 'contributor', via: 'session', email: 'e@example.org', name: 'Editor' });
  });

  it('redirects a browser without a session to the login with the return URL', async () => {
    const response = await fetch(`${url}/editor/features?kind=denkmal`, { headers: { accept: 'text/html' }, redirect: 'manual' });
    expect(response.status).toBe(303);
    const location = new URL(response.headers.get('location') as string);
    expect(`${location.origin}${location.pathname}`).toBe(LOGIN);
    expect(location.searchParams.get('return_to')).toBe('https://app.example.org/editor/features?kind=denkmal');
    expect(location.searchParams.has('aal')).toBe(false);
  });

  it('builds the return URL from the configured base, not from a forged Host header', async () => {
    const response = await fetch(`${url}/editor/`, { headers: { accept: 'text/html', host: 'evil.example.com' }, redirect: 'manual' });
    expect(new URL(response.headers.get('location') as string).searchParams.get('return_to')).toBe('https://app.example.org/editor/');
  });

  it('redirects a session that still needs its second factor (whoami 403) to the aal2 login', async () => {
    const user = kratos.addIdentity({ email: 'mfa@example.org', name: 'M', password: 'x', secondFactor: true });
    const session = kratos.createSession(user.id, { aal: 'aal1' });
    const response = await fetch(`${url}/editor/`, { headers: { accept: 'text/html', cookie: `ory_kratos_session=${session.token}` }, redirect: 'manual' });
    expect(response.status).toBe(303);
    const location = new URL(response.headers.get('location') as string);
    expect(location.searchParams.get('aal')).toBe('aal2');
    expect(location.searchParams.get('return_to')).toBe('https://app.example.org/editor/');
  });

  it('answers an API client 401 JSON instead of a redirect', async () => {
    const response = await fetch(`${url}/editor/features`, { method: 'POST', headers: { accept: 'application/json' } });
    expect(response.status).toBe(401);
    expect(await response.json()).toMatchObject({ error: 'unauthenticated' });
  });

  it('an ended session is no longer let through', async () => {
    const user = kratos.addIdentity({ email: 'gone@example.org', name: 'G', password: 'x' });
    const session = kratos.createSession(user.id);
    session.active = false;
    const response = await fetch(`${url}/editor/`, { headers: { accept: 'text/html', cookie: `ory_kratos_session=${session.token}` }, redirect: 'manual' });
    expect(response.status).toBe(303);
  });

  it('answers 503 when Kratos is unreachable, never letting the request through', async () => {
    const { frontend } = createOryClients({ kratosPublicUrl: 'http://127.0.0.1:9', kratosAdminUrl: 'http://127.0.0.1:9', hydraAdminUrl: 'http://127.0.0.1:9', timeoutMs: 500 });
    const app = express();
    app.use(createRouteGuard({ frontend, loginUrl: LOGIN, publicBaseUrl: 'https://app.example.org' }), (_req, res) => {
      res.send('secret');
    });
    const down = createServer(app);
    const port = await listen(down, 0, '127.0.0.1');
    try {
      const response = await fetch(`http://127.0.0.1:${port}/`, { headers: { cookie: 'ory_kratos_session=abc' } });
      expect(response.status).toBe(503);
    } finally {
      await closeGracefully(down, 100);
    }
  });
});
