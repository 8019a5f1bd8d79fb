import { execFile } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import * as oidc from 'openid-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { closeGracefully, listen } from '../../services/shared/http-server.js';
import { createLogger } from '../../services/shared/logger.js';
import { createIdentityApp } from '../src/app/app.js';
import { loadIdentityAppConfig } from '../src/app/config.js';
import { syncClients } from '../src/clients/sync.js';
import { createOryClients } from '../../services/shared/ory/clients.js';
import { TestBrowser } from './browser.js';
import { freePort } from '../../services/shared/testing/ports.js';
import { eventually } from '../../test/helpers/wait.js';

/**
 * End to end against the real oryd/kratos and oryd/hydra v26.2.0 images: the rendered configs mounted
 * the way infra/ mounts them, migrations, then the same authorization code flow as the double tests.
 * Runs only where a Docker engine answers `docker info`; anywhere else it prints why it skipped.
 */

const exec = promisify(execFile);
const KRATOS_IMAGE = 'oryd/kratos:v26.2.0';
const HYDRA_IMAGE = 'oryd/hydra:v26.2.0';
const POSTGRES_IMAGE = 'postgres:16-alpine';

async function dockerUnavailableReason(): Promise<string | undefined> {
  try {
    await exec('docker', ['info', '--format', '{{.ServerVersion}}'], { timeout: 10_000 });
    return undefined;
  } catch (error) {
    const e = error as { code?: string; stderr?: string; message: string };
    return e.code === 'ENOENT' ? 'the docker CLI is not installed' : `docker info failed: ${(e.stderr || e.message).trim().split('\n')[0]}`;
  }
}

const skipReason = await dockerUnavailableReason();
if (skipReason) console.warn(`[identity e2e] skipped: ${skipReason}. Run \`npm run identity:e2e\` on a machine with a Docker engine.`);


/** Until `url` answers 2xx (the containers' readiness endpoints). */
const ready = (url: string): Promise<true> =>
  eventually(`${url} to be ready`, async () => (await fetch(url).then((response) => response.ok, () => false)) || undefined, 60_000, 500);

describe.skipIf(skipReason !== undefined)('identity stack on real Kratos and Hydra containers', () => {
  const suffix = Math.random().toString(36).slice(2, 8);
  const network = `identity-e2e-${suffix}`;
  const containers: string[] = [];
  let app: Server;
  let env: Record<string, string>;

  async function docker(...args: string[]): Promise<string> {
    return (await exec('docker', args, { timeout: 180_000 })).stdout.trim();
  }

  beforeAll(async () => {
    const [appPort, kratosPublic, kratosAdmin, hydraPublic, hydraAdmin] = await Promise.all([freePort(), freePort(), freePort(), freePort(), freePort()]);
    const appUrl = `http://127.0.0.1:${appPort}`;
    env = {
      IDENTITY_DEV_MODE: 'true',
      IDENTITY_PARENT_DOMAIN: '127.0.0.1',
      IDENTITY_AUTH_URL: appUrl,
      IDENTITY_APP_URL: `${appUrl}/health/alive`,
      KRATOS_PUBLIC_URL: `http://127.0.0.1:${kratosPublic}`,
      KRATOS_ADMIN_URL: `http://127.0.0.1:${kratosAdmin}`,
      HYDRA_PUBLIC_URL: `http://127.0.0.1:${hydraPublic}/`,
      HYDRA_ADMIN_URL: `http://127.0.0.1:${hydraAdmin}`,
      IDENTITY_SMTP_FROM: 'noreply@example.org',
      KRATOS_IDENTITY_SCHEMA_URL: 'file:///etc/config/kratos/identity.schema.json',
      IDENTITY_COOKIE_SECRET: 'e2e-cookie-secret-of-at-least-32-characters',
    };
    const configDir = mkdtempSync(join(tmpdir(), 'identity-e2e-'));
    await exec(process.execPath, ['--import', 'tsx', join(import.meta.dirname, '../src/config/render-cli.ts'), '--out', configDir], { env: { ...process.env, ...env } });

    await docker('network', 'create', network);
    containers.push(await docker('run', '-d', '--rm', '--network', network, '--name', `db-${suffix}`, '-e', 'POSTGRES_PASSWORD=e2e', '-e', 'POSTGRES_DB=kratos', POSTGRES_IMAGE));
    await waitForPostgres(`db-${suffix}`);
    await docker('exec', `db-${suffix}`, 'psql', '-U', 'postgres', '-c', 'CREATE DATABASE hydra');
    const kratosDsn = `postgres://postgres:e2e@db-${suffix}:5432/kratos?sslmode=disable`;
    const hydraDsn = `postgres://postgres:e2e@db-${suffix}:5432/hydra?sslmode=disable`;
    const mount = ['-v', `${configDir}:/etc/config/kratos:ro`];
    await docker('run', '--rm', '--network', network, ...mount, '-e', `DSN=${kratosDsn}`, KRATOS_IMAGE, 'migrate', 'sql', '-e', '--yes', '--config', '/etc/config/kratos/kratos.yml');
    await docker('run', '--rm', '--network', network, '-e', `DSN=${hydraDsn}`, HYDRA_IMAGE, 'migrate', 'sql', '-e', '--yes');
    // Ports published on the same numbers inside and out, so the URLs in the configs work for both.
    containers.push(
      await docker('run', '-d', '--rm', '--network', 'host', ...mount,
        '-e', `DSN=${kratosDsn.replace(`db-${suffix}`, await dbAddress(`db-${suffix}`))}`, '-e', 'SECRETS_DEFAULT=e2e-default-secret-0123456789', '-e', 'SECRETS_COOKIE=e2e-cookie-secret-0123456789',
        '-e', 'SECRETS_CIPHER=0123456789abcdef0123456789abcdef', '-e', 'COURIER_SMTP_CONNECTION_URI=smtp://127.0.0.1:1025/?disable_starttls=true',
        '-e', `SERVE_PUBLIC_PORT=${kratosPublic}`, '-e', `SERVE_ADMIN_PORT=${kratosAdmin}`,
        KRATOS_IMAGE, 'serve', '--dev', '--config', '/etc/config/kratos/kratos.yml'),
    );
    containers.push(
      await docker('run', '-d', '--rm', '--network', 'host', '-v', `${configDir}:/etc/config/hydra:ro`,
        '-e', `DSN=${hydraDsn.replace(`db-${suffix}`, await dbAddress(`db-${suffix}`))}`, '-e', 'SECRETS_SYSTEM=e2e-system-secret-0123456789abcdef0123',
        '-e', `SERVE_PUBLIC_PORT=${hydraPublic}`, '-e', `SERVE_ADMIN_PORT=${hydraAdmin}`,
        HYDRA_IMAGE, 'serve', 'all', '--dev', '--config', '/etc/config/hydra/hydra.yml'),
    );
    await Promise.all([ready(`${env.KRATOS_ADMIN_URL}/health/ready`), ready(`${env.HYDRA_ADMIN_URL}/health/ready`)]);

    const config = { ...loadIdentityAppConfig({ ...env, IDENTITY_PORT: String(appPort) }) };
    const ory = createOryClients({ kratosPublicUrl: env.KRATOS_PUBLIC_URL as string, kratosAdminUrl: env.KRATOS_ADMIN_URL as string, hydraAdminUrl: env.HYDRA_ADMIN_URL as string });
    app = createServer(createIdentityApp({ ory, config, logger: createLogger('identity-e2e', { level: 'warn' }) }));
    await listen(app, appPort, '127.0.0.1');
  }, 600_000);

  async function waitForPostgres(name: string): Promise<void> {
    for (let i = 0; i < 60; i += 1) {
      try {
        await docker('exec', name, 'pg_isready', '-U', 'postgres');
        return;
      } catch {
        await new Promise((resolve) => setTimeout(resolve, 1000));
      }
    }
    throw new Error('postgres did not start');
  }

  async function dbAddress(name: string): Promise<string> {
    return docker('inspect', '-f', '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}', name);
  }

  afterAll(async () => {
    if (app) await closeGracefully(app, 1000);
    for (const id of containers.reverse()) await docker('rm', '-f', id).catch(() => undefined);
    await docker('network', 'rm', network).catch(() => undefined);
  }, 120_000);

  it('signs a user in through the login app and issues an ID token with the role', async () => {
    const ory = createOryClients({ kratosPublicUrl: env.KRATOS_PUBLIC_URL as string, kratosAdminUrl: env.KRATOS_ADMIN_URL as string, hydraAdminUrl: env.HYDRA_ADMIN_URL as string });
    const identity = (
      await ory.identity.createIdentity({
        createIdentityBody: {
          schema_id: 'person',
          traits: { email: 'e2e@example.org', name: 'End To End' },
          metadata_public: { role: 'reviewer' },
          credentials: { password: { config: { password: 'a long e2e password 1' } } },
        },
      })
    ).data;
    const callback = 'http://127.0.0.1:9/callback';
    const [outcome] = await syncClients(ory.oauth2, [{ client_id: 'e2e-client', client_name: 'E2E', public: false, first_party: true, redirect_uris: [callback], post_logout_redirect_uris: [], audience: [] }]);
    const secret = (outcome as { clientSecret: string }).clientSecret;
    const rp = await oidc.discovery(new URL(env.HYDRA_PUBLIC_URL as string), 'e2e-client', undefined, oidc.ClientSecretBasic(secret), { execute: [oidc.allowInsecureRequests] });
    const verifier = oidc.randomPKCECodeVerifier();
    const state = oidc.randomState();
    const url = oidc.buildAuthorizationUrl(rp, { redirect_uri: callback, scope: 'openid profile email', state, code_challenge: await oidc.calculatePKCECodeChallenge(verifier), code_challenge_method: 'S256' });
    const browser = new TestBrowser();
    browser.stopAt = [callback];
    const loginPage = await browser.go(url.toString());
    const done = await browser.submit(loginPage, '/self-service/login', { identifier: 'e2e@example.org', password: 'a long e2e password 1' });
    const tokens = await oidc.authorizationCodeGrant(rp, new URL(done.url), { pkceCodeVerifier: verifier, expectedState: state });
    expect(tokens.claims()).toMatchObject({ sub: identity.id, email: 'e2e@example.org', role: 'reviewer' });
  });
});
