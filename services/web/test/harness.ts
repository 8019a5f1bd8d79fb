/**
 * The web app under test, for real: the feature API as its own process (`services/api/src/server.ts`
 * with its development key, so the development sign-in works) on a fresh PostGIS database, the built
 * Astro server (`dist/server/entry.mjs`) as another process, a tiny local basemap tile server (the
 * test machine has no internet), and helpers for headless Chromium and axe-core.
 *
 * The API runs compiled, as `npm start` runs it (see apiEntry), not under tsx: built once per state
 * of its sources and shared by every test file and worker, as the web app's build is.
 *
 * Needs TEST_DATABASE_URL (PostGIS) and Chromium; `missingForBrowserTests()` names what is missing.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { acquireBuildLock, ensureWebBuild, startWebServer } from '../launch.js';
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { deflateSync } from 'node:zlib';
import { createRequire } from 'node:module';
import { chromium, type Browser, type BrowserContext, type BrowserContextOptions, type Locator, type Page } from 'playwright-core';
import { createTestDatabase, type TestDatabase } from '../../../test/helpers/db.js';
import { freePort } from '../../shared/testing/ports.js';
import { firstMissing, requirements } from '../../../test/helpers/requirements.js';
import { eventually } from '../../../test/helpers/wait.js';
import { compiled } from '../../../scripts/compiled.mjs';

export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const here = dirname(fileURLToPath(import.meta.url));
export const repoRoot = join(here, '../../..');

/** One line naming what a browser test of the web app lacks, or undefined when it can run. */
export function missingForBrowserTests(): string | undefined {
  return firstMissing(requirements.chromium(), requirements.postgres('a PostgreSQL with PostGIS; .ci/run sets one up'));
}

/** A one-colour 256×256 PNG, so the basemap has tiles without the internet. */
export function plainTile(): Buffer {
  const crcTable = Array.from({ length: 256 }, (_, n) => {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    return c >>> 0;
  });
  const crc = (buffer: Buffer) => {
    let c = 0xffffffff;
    for (const byte of buffer) c = crcTable[(c ^ byte) & 0xff]! ^ (c >>> 8);
    return (c ^ 0xffffffff) >>> 0;
  };
  const chunk = (type: string, data: Buffer) => {
    const body = Buffer.concat([Buffer.from(type), data]);
    const out = Buffer.alloc(12 + data.length);
    out.writeUInt32BE(data.length, 0);
    body.copy(out, 4);
    out.writeUInt32BE(crc(body), 8 + data.length);
    return out;
  };
  const header = Buffer.alloc(13);
  header.writeUInt32BE(256, 0);
  header.writeUInt32BE(256, 4);
  header[8] = 8; // bit depth
  header[9] = 2; // RGB
  const row = Buffer.concat([Buffer.from([0]), Buffer.from(Array.from({ length: 256 }, () => [0xee, 0xf1, 0xe6]).flat())]);
  const pixels = deflateSync(Buffer.concat(Array.from({ length: 256 }, () => row)));
  return Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), chunk('IHDR', header), chunk('IDAT', pixels), chunk('IEND', Buffer.alloc(0))]);
}

export async function startTileServer(): Promise<{ url: string; server: Server }> {
  const tile = plainTile();
  const server = createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'image/png', 'access-control-allow-origin': '*', 'cache-control': 'max-age=3600' });
    res.end(tile);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address() as { port: number };
  return { url: `http://127.0.0.1:${address.port}/{z}/{x}/{y}.png`, server };
}

/** Waits until `url` answers below 500; fails at once, with the process's output, when the process ends first. */
async function waitForHttp(url: string, child: ChildProcess, output: () => string, timeoutMs = 90_000): Promise<void> {
  const ended = () => child.exitCode !== null || child.signalCode !== null;
  const outcome = await eventually(`${url} to answer`, async () => {
    if (ended()) return 'ended';
    const response = await fetch(url).catch(() => undefined); // not listening yet
    await response?.body?.cancel();
    return response !== undefined && response.status < 500 && 'answered';
  }, timeoutMs, 200).catch((error: Error) => {
    throw new Error(`${error.message}:\n${output()}`, { cause: error });
  });
  if (outcome === 'ended') throw new Error(`process for ${url} exited with ${child.exitCode ?? child.signalCode}:\n${output()}`);
}

function startProcess(args: string[], env: Record<string, string>, cwd: string): { child: ChildProcess; output: () => string } {
  let output = '';
  const child = spawn(process.execPath, args, { cwd, env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? tmpdir(), ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  child.stdout?.on('data', (data: Buffer) => (output = (output + data.toString()).slice(-20_000)));
  child.stderr?.on('data', (data: Buffer) => (output = (output + data.toString()).slice(-20_000)));
  return { child, output: () => output };
}

export interface WebStack {
  webUrl: string;
  apiUrl: string;
  db: TestDatabase;
  /** A development token for direct API calls (setup and assertions). */
  token(role: string, sub: string): Promise<string>;
  api<T = unknown>(method: string, path: string, options?: { token?: string; body?: unknown; headers?: Record<string, string> }): Promise<{ status: number; body: T; headers: Headers }>;
  close(): Promise<void>;
}

/** `npm start` bundles the API with its embedded-database thread: the same entries share its build. */
const API_ENTRY = 'services/api/src/server.ts';
const API_ALSO = ['services/api/src/db/embedded-thread.ts'];

/**
 * The API's compiled entry (absolute path): the esbuild bundle of services/api/src/server.ts that `npm
 * start` runs (scripts/compiled.mjs), built when missing or when a source file in it changed (its
 * manifest holds their SHA-256; checking them is all a later call does) and reused by every test file
 * and worker. Each module keeps its own import.meta.url, so migrations, config/ and .cache/embedded-db
 * are found where they are, as under tsx.
 * Why: under tsx each file's API loaded the TypeScript loader and transpiled sources first. Spawn to
 * /healthz, medians of 6 interleaved starts on one migrated database (load 5-6): tsx 1.65 s, this
 * bundle 0.75 s (infra/docker/build.ts's file-by-file tree, the image's, 0.81 s).
 * Two workers do not build at once: the web build's lock (launch.ts acquireBuildLock; one left by a
 * dead process is taken over). A build that fails fails the calling file, saying so (no tsx fallback).
 */
export async function apiEntry(): Promise<string> {
  mkdirSync(join(repoRoot, '.cache/start'), { recursive: true });
  const release = acquireBuildLock(join(repoRoot, '.cache/start/api-build.lock'), { log: console.log });
  try {
    return await compiled(API_ENTRY, API_ALSO);
  } catch (error) {
    throw new Error(`the API could not be compiled (scripts/compiled.mjs): ${(error as Error).message}`, { cause: error });
  } finally {
    release();
  }
}

export async function startWebStack(options: { webEnv?: Record<string, string>; apiEnv?: Record<string, string> } = {}): Promise<WebStack> {
  ensureWebBuild();
  const apiMain = await apiEntry();
  const db = await createTestDatabase();
  const dataDir = mkdtempSync(join(tmpdir(), 'web-test-'));
  const tiles = await startTileServer();
  const [apiPort, webPort] = [await freePort(), await freePort()];
  const apiUrl = `http://127.0.0.1:${apiPort}`;
  const webUrl = `http://127.0.0.1:${webPort}`;
  // Source maps on, as under tsx and npm start: a stack trace in the API's output names the .ts line.
  const api = startProcess(['--enable-source-maps', apiMain], {
    DATABASE_URL: db.url,
    PORT: String(apiPort),
    DATA_DIR: dataDir,
    CORS_ORIGINS: webUrl,
    WORKER_ENABLED: 'false',
    LOG_LEVEL: 'warn',
    NODE_ENV: 'development',
    RATE_LIMIT_WRITES_PER_MINUTE: '0',
    ...options.apiEnv,
  }, repoRoot);
  const webEnv = {
    API_PUBLIC_URL: apiUrl,
    PUBLIC_BASE_URL: webUrl,
    BASEMAP_URL: tiles.url,
    BASEMAP_ATTRIBUTION: 'Test tiles',
    NODE_ENV: 'development',
    ...options.webEnv,
  };
  let web: Awaited<ReturnType<typeof startWebServer>> | undefined;
  const stop = async () => {
    await web?.close();
    for (const child of [api.child]) {
      if (child.exitCode === null) {
        child.kill('SIGTERM');
        await new Promise((resolve) => child.once('exit', resolve));
      }
    }
    tiles.server.close();
    await db.close();
    rmSync(dataDir, { recursive: true, force: true });
  };
  // The web server is kept as soon as it runs: when the API fails to start, stop() must end it too
  // (with Promise.all's result alone it was left running after the failure).
  const webStarted = startWebServer({ port: webPort, env: webEnv }).then((started) => (web = started));
  try {
    await Promise.all([webStarted, waitForHttp(`${apiUrl}/healthz`, api.child, api.output)]);
  } catch (error) {
    await webStarted.catch(() => undefined);
    await stop();
    throw error;
  }
  const call: WebStack['api'] = async (method, path, { token, body, headers = {} } = {}) => {
    const response = await fetch(`${apiUrl}${path}`, {
      method,
      headers: { ...(token ? { authorization: `Bearer ${token}` } : {}), ...(body !== undefined ? { 'content-type': 'application/json' } : {}), ...headers },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
    const text = await response.text();
    return { status: response.status, body: (text ? JSON.parse(text) : undefined) as never, headers: response.headers };
  };
  return {
    webUrl,
    apiUrl,
    db,
    async token(role, sub) {
      const { body } = await call<{ token: string }>('POST', '/api/dev/token', { body: { role, sub } });
      return body.token;
    },
    api: call,
    close: stop,
  };
}

export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
}

/**
 * A page in a fresh browser context (German, 1100 × 800 unless `options` say otherwise), signed in
 * through the site's development sign-in as `as.role`/`as.sub`, or anonymous without `as`. The
 * context is added to `contexts`, which the test closes.
 */
export async function openPage(browser: Browser, webUrl: string, contexts: BrowserContext[], as?: { role: string; sub: string }, options: BrowserContextOptions = {}): Promise<Page> {
  const context = await browser.newContext({ locale: 'de-DE', viewport: { width: 1100, height: 800 }, ...options });
  contexts.push(context);
  const page = await context.newPage();
  if (as) {
    await page.goto(`${webUrl}/login?as=${as.role}&sub=${as.sub}`);
    await page.waitForURL(`${webUrl}/`);
  }
  return page;
}

/** Whether the element has the keyboard focus (for keyboard-only paths). */
export const isFocused = (locator: Locator): Promise<boolean> => locator.evaluate((element) => element === element.ownerDocument.activeElement);

const axeSource = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');

/** axe-core on the page as it is now: the serious and critical violations, one line each. */
export async function seriousViolations(page: Page): Promise<string[]> {
  await page.addScriptTag({ content: axeSource });
  // globalThis, not window: this file is also compiled by the root tsconfig (no DOM library) via bench/.
  const violations = await page.evaluate(async () => {
    const { axe, document } = globalThis as unknown as { document: unknown; axe: { run(context: unknown, options: object): Promise<{ violations: Array<{ id: string; impact: string; nodes: Array<{ target: unknown }> }> }> } };
    const result = await axe.run(document, { resultTypes: ['violations'] });
    return result.violations.map((v) => ({ id: v.id, impact: v.impact, targets: v.nodes.slice(0, 3).map((n) => JSON.stringify(n.target)) }));
  });
  return violations.filter((v) => v.impact === 'serious' || v.impact === 'critical').map((v) => `${v.id} (${v.impact}) at ${v.targets.join(', ')} on ${page.url()}`);
}
