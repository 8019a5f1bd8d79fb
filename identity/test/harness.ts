import { createServer, type Server } from 'node:http';
import { Writable } from 'node:stream';
import { afterAll, afterEach, beforeAll, expect } from 'vitest';
import { closeGracefully, listen } from '../../services/shared/http-server.js';
import { createLogger } from '../../services/shared/logger.js';
import { createIdentityApp } from '../src/app/app.js';
import type { IdentityAppConfig } from '../src/app/config.js';
import { createOryClients, type OryClients } from '../../services/shared/ory/clients.js';
import { TestClock } from '../../services/shared/testing/ory/clock.js';
import { HydraDouble } from '../../services/shared/testing/ory/hydra-double.js';
import { KratosDouble, type KratosDoubleOptions } from '../../services/shared/testing/ory/kratos-double.js';
import type { PageResult, TestBrowser } from './browser.js';

/**
 * The identity stack for a test file: the Kratos and Hydra doubles (four real HTTP servers) and the
 * login/consent/logout app on port 0, wired to each other the way kratos.yml and hydra.yml wire them.
 */
export interface IdentityStack {
  clock: TestClock;
  kratos: KratosDouble;
  hydra: HydraDouble;
  ory: OryClients;
  config: IdentityAppConfig;
  appUrl: string;
  logLines: string[];
  close(): Promise<void>;
}

export const COOKIE_SECRET = 'test-cookie-secret-of-at-least-32-chars!';

export async function startIdentityStack(overrides: Partial<IdentityAppConfig> = {}, kratosOverrides: Partial<KratosDoubleOptions> = {}): Promise<IdentityStack> {
  const clock = new TestClock();
  // The doubles need the app's URL and the app needs theirs: start the doubles with placeholders and
  // fill in the app's URL once it listens (the doubles read their options per request).
  const kratosOptions = { clock, loginUiUrl: '', allowedReturnUrls: [] as string[], ...kratosOverrides };
  const hydraOptions = { clock, loginUrl: '', consentUrl: '', logoutUrl: '', postLogoutRedirect: 'http://127.0.0.1:9/after-logout' };
  const kratos = await new KratosDouble(kratosOptions).start();
  const hydra = await new HydraDouble(hydraOptions).start();

  const ory = createOryClients({ kratosPublicUrl: kratos.public.url, kratosAdminUrl: kratos.admin.url, hydraAdminUrl: hydra.admin.url, timeoutMs: 3000 });
  const config: IdentityAppConfig = {
    port: 0,
    authUrl: '',
    appUrl: 'http://127.0.0.1:9/app',
    kratosPublicUrl: kratos.public.url,
    kratosPublicInternalUrl: kratos.public.url,
    kratosAdminUrl: kratos.admin.url,
    hydraAdminUrl: hydra.admin.url,
    cookieSecret: COOKIE_SECRET,
    rememberSeconds: 3600,
    loginLimit: { perIp: 50, perAccount: 3, windowMs: 60_000 },
    trustProxy: 'loopback',
    logLevel: 'info',
    secureCookies: false,
    ...overrides,
  };
  const logLines: string[] = [];
  const destination = new Writable({
    write(chunk: Buffer, _enc, done) {
      logLines.push(chunk.toString('utf8'));
      done();
    },
  });
  const logger = createLogger('identity-test', { destination });
  const server: Server = createServer(createIdentityApp({ ory, config, logger, now: clock.now }));
  const port = await listen(server, 0, '127.0.0.1');
  const appUrl = `http://127.0.0.1:${port}`;
  config.authUrl = appUrl;

  kratosOptions.loginUiUrl = `${appUrl}/self-service/login`;
  kratosOptions.allowedReturnUrls.push(appUrl, 'http://127.0.0.1:9');
  Object.assign(hydraOptions, { loginUrl: `${appUrl}/login`, consentUrl: `${appUrl}/consent`, logoutUrl: `${appUrl}/logout` });

  return {
    clock,
    kratos,
    hydra,
    ory,
    config,
    appUrl,
    logLines,
    async close() {
      await closeGracefully(server, 500);
      await Promise.all([kratos.close(), hydra.close()]);
    },
  };
}

/** Every exchange the doubles saw was on contract (call in afterEach). */
export function contractViolations(stack: IdentityStack): string[] {
  return [...stack.kratos.violations, ...stack.hydra.violations];
}

/**
 * The hooks of a test file whose tests share one stack: start it before the first test, close it after
 * the last, and after each test expect every exchange the doubles saw to be on contract. `missing` is the
 * file's `lacks(…)`: when true its describe blocks skip and nothing starts. `started` receives the
 * stack before any test runs (the file keeps it, and may add its fixtures there).
 */
export function useIdentityStack(
  missing: boolean,
  started: (stack: IdentityStack) => void,
  overrides: Partial<IdentityAppConfig> = {},
  kratosOverrides: Partial<KratosDoubleOptions> = {},
): void {
  let stack: IdentityStack | undefined;
  beforeAll(async () => {
    if (missing) return;
    stack = await startIdentityStack(overrides, kratosOverrides);
    started(stack);
  });
  afterAll(async () => {
    await stack?.close();
  });
  afterEach(() => {
    if (missing) return;
    expect(contractViolations(stack as IdentityStack)).toEqual([]);
  });
}

/** A browser opens Kratos' login flow for `returnTo` and lands on the login app's form. */
export async function openLoginForm(stack: IdentityStack, browser: TestBrowser, returnTo = 'http://127.0.0.1:9/app'): Promise<PageResult> {
  const page = await browser.go(`${stack.kratos.public.url}/self-service/login/browser?return_to=${encodeURIComponent(returnTo)}`);
  expect(page.url).toContain('/self-service/login?flow=');
  return page;
}
