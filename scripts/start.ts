/**
 * `npm start`: the platform locally, each service in its own child process.
 * - the feature API (`services/api/src/server.ts`) on http://localhost:8080 (PORT); with DATABASE_URL
 *   unset it runs on the embedded PGlite + PostGIS database in DATA_DIR/pglite;
 * - the deployment webhook server (`services/webhook/src/server.ts`) on http://127.0.0.1:9321
 *   (WEBHOOK_PORT) with development secrets generated here for this run and printed once (left out with
 *   NODE_ENV=production, where secrets come from a file; START_WEBHOOK=false leaves it out too);
 * - the web app (`services/web`, the built Astro server) on http://localhost:4321 (WEB_PORT;
 *   START_WEB=false leaves it out), built first when services/web/dist is missing or stale, with the
 *   development sign-in at /login. Its origins are added to the API's CORS_ORIGINS.
 *
 * Start-up time (docs/api.md, "What makes it start fast", has the figures): every service runs as
 * compiled JavaScript from .cache/start/ (scripts/compiled.mjs; rebuilt when a source changed, in
 * well under a second), never through tsx. The API is spawned first, before this process loads
 * anything else, and opens its embedded database in a thread of its own while it loads its modules.
 * The web app's build check (and build, if needed) runs beside the API's start, and the web server
 * starts once the API is ready — it listens only after its database is open and migrated — so the
 * map never answers before the API it reads from exists (with a fixed PORT it used to start at once,
 * and answered half a minute before the API on a fresh data folder). A fresh data folder starts from
 * a cached database image (see services/api/src/db/embedded-image.ts).
 *
 * Signals: SIGTERM or SIGINT to this process — also while the services are still starting — is passed
 * to each child as SIGTERM; each drains and stops (the API also closes its database and releases the
 * data folder), and this process exits once they all have. A child that does not stop within
 * STOP_TIMEOUT_MS is killed.
 *
 * Crashes: a child that exits by itself once the platform is ready (with any code but 2, or killed by
 * a signal this process did not send) is restarted, and the others keep running — as systemd's
 * Restart= with RestartSec, or Docker's restart policy, would. The delay doubles per consecutive
 * crash, 1 s, 2 s, 4 s … up to 30 s, and starts again at 1 s once a restarted child has stayed up for
 * 60 s. Each crash is logged at error level (service, exit code or signal, the delay), each restart
 * at warn level (with the new pid). A restarted child gets the port it had (an API started with
 * PORT=0 comes back on the port it was given), so the web app's API_URL and the printed addresses
 * stay right. Exit code 2 is a configuration error, which a restart cannot heal: it stops the others
 * and this process exits 2. A signal during a delay or a restart stops everything as above, and
 * nothing is restarted once a stop has begun. A child that fails before the platform is ready is not
 * restarted either: the start fails.
 *
 * Exit codes: 0 stopped cleanly (also after restarts), 1 failed (a child failed to start or to stop),
 * 2 bad configuration (a child's configuration error, also when a restarted child reports one).
 *
 * This file imports no service's src/ (eslint forbids it): a service is a process with an environment,
 * which is also how it runs in production.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { API_NODE_FLAGS } from '../services/shared/node-flags.js';
import type { loadTargets as LoadTargets } from '../services/shared/targets.js';
import { webEntry } from '../services/web/launch.js';
import { compiled } from './compiled.mjs';

const repoRoot = join(dirname(fileURLToPath(import.meta.url)), '..');
// Generous: a service stopped while it creates its embedded database finishes that first (cutting
// initdb short would leave a broken data folder), which takes long on a busy machine.
const STOP_TIMEOUT_MS = 120_000;
/** The delay before the first restart after a crash; it doubles per consecutive crash, up to the next. */
const RESTART_FIRST_DELAY_MS = 1_000;
const RESTART_MAX_DELAY_MS = 30_000;
/** A restarted child that stays up this long has healed: its next crash waits the first delay again. */
const RESTART_RESET_AFTER_MS = 60_000;
/** The API's embedded-database thread, compiled with the API (see services/api/src/server.ts). */
const EMBEDDED_DB_THREAD = 'services/api/src/db/embedded-thread.ts';

interface Service {
  name: 'api' | 'webhook' | 'web';
  /** How it was started, for a restart: node's arguments, the environment, its "listening" line. */
  args: string[];
  env: NodeJS.ProcessEnv;
  listening: RegExp;
  child: ChildProcess;
  /** performance.now() at the spawn: how long it stayed up decides the delay of its next restart. */
  startedAt: number;
  /** It crashed and a restart was scheduled: a stop has nothing to stop here and no failure to count. */
  crashed?: true;
  /**
   * Resolves with the port the service announces over the IPC channel (`{ listening: port }`, which
   * no LOG_LEVEL hides) or, for the web app, in its "listening" log line; rejects when it exits first.
   */
  ready: Promise<number>;
  /**
   * Resolves once a SIGTERM would stop the service gracefully rather than kill it: when it says so
   * over the IPC channel (the API does, before loading its modules), or at the latest once it listens.
   */
  handlesSignals: Promise<void>;
  exited: Promise<number>;
}

/** `args` is what node runs: a compiled or built entry. */
function startService(name: Service['name'], args: string[], env: NodeJS.ProcessEnv, listening: RegExp): Service {
  // node itself rather than a CLI wrapper: one process per service, which gets our signals directly.
  const child = spawn(process.execPath, args, { cwd: repoRoot, env, stdio: ['ignore', 'pipe', 'inherit', 'ipc'] });
  child.channel?.unref();
  const exited = new Promise<number>((resolve) => child.on('exit', (code, signal) => resolve(code ?? (signal === 'SIGKILL' ? 137 : 143))));
  const told = new Promise<void>((resolve) => child.on('message', (message: { signals?: string }) => message.signals === 'handled' && resolve()));
  const ready = new Promise<number>((resolve, reject) => {
    child.on('message', (message: { listening?: unknown }) => {
      if (typeof message.listening === 'number') resolve(message.listening);
    });
    let pending = '';
    child.stdout!.on('data', (chunk: Buffer) => {
      // The service's log goes on to our stdout as it is; we only watch for its listening line.
      process.stdout.write(chunk);
      pending += chunk.toString('utf8');
      const lines = pending.split('\n');
      pending = lines.pop() ?? '';
      for (const line of lines) {
        const port = listening.exec(line)?.[1];
        if (port) resolve(Number(port));
      }
    });
    void exited.then((code) => reject(new Error(`${name} exited with code ${code} before it was ready`)));
  });
  ready.catch(() => undefined); // observed by the caller; no unhandled rejection when stopped early
  const handlesSignals = Promise.race([told, ready.then(() => undefined, () => undefined)]);
  return { name, args, env, listening, child, startedAt: performance.now(), ready, handlesSignals, exited };
}

/** Runs the web app's build check (services/web/launch.ts) in a child process; resolves with its exit code. */
async function buildWeb(): Promise<number> {
  const child = spawn(process.execPath, ['--enable-source-maps', await compiled('scripts/build-web.ts')], { cwd: repoRoot, stdio: ['ignore', 'inherit', 'inherit'] });
  return new Promise((resolve) => child.on('exit', (code) => resolve(code ?? 1)));
}

/** A random secret per deploy target, as the webhook server reads them from its environment. */
function developmentSecrets(loadTargets: typeof LoadTargets): Record<string, string> {
  const targets = loadTargets(process.env.TARGETS_FILE ?? join(repoRoot, 'config/targets.yaml'));
  return Object.fromEntries(targets.map((t) => [t.secret, randomBytes(32).toString('hex')]));
}

// The API is what the platform waits for, so it is spawned first, before this process loads
// anything it does not need for that (pino, yaml and zod are loaded meanwhile, below). A signal
// until the handlers further down exist is remembered, and stops whatever was started by then.
const started = performance.now();
let earlySignal: NodeJS.Signals | undefined;
const remember = (signal: NodeJS.Signals): void => void (earlySignal ??= signal);
process.on('SIGTERM', remember);
process.on('SIGINT', remember);
const production = process.env.NODE_ENV === 'production';
const withWebhook = process.env.START_WEBHOOK !== 'false' && !production;
const withWeb = process.env.START_WEB !== 'false';
const webPort = Number(process.env.WEB_PORT ?? 4321);
if (withWeb && !(Number.isInteger(webPort) && webPort >= 1 && webPort <= 65535)) {
  console.error('WEB_PORT: must be a port number (1-65535)');
  process.exit(2);
}
// The site's pages call the API from the browser: its origins may read answers and send changes.
const webOrigins = withWeb ? [`http://localhost:${webPort}`, `http://127.0.0.1:${webPort}`] : [];
const corsOrigins = [process.env.CORS_ORIGINS ?? '', ...webOrigins].filter(Boolean).join(',');
const apiEntry = await compiled('services/api/src/server.ts', [EMBEDDED_DB_THREAD]);
// The embedded database runs in a thread of its own, started before the API loads its modules.
const apiEnv = { ...process.env, CORS_ORIGINS: corsOrigins, API_EMBEDDED_DB_THREAD: join(dirname(apiEntry), 'embedded-thread.mjs') };
const earlyApi = earlySignal ? undefined : startService('api', ['--enable-source-maps', ...API_NODE_FLAGS, apiEntry], apiEnv, /"port":(\d+).*"msg":"api listening"/);

const [{ runMain }, { createLogger }, { loadTargets }] = await Promise.all([
  import('../services/shared/config.js'),
  import('../services/shared/logger.js'),
  import('../services/shared/targets.js'),
]);

runMain(async () => {
  const logger = createLogger('platform', { level: process.env.LOG_LEVEL ?? 'info' });
  const services: Service[] = earlyApi ? [earlyApi] : [];
  let stopping: Promise<number> | undefined;
  // Aborted when a stop begins: cuts a restart's delay short.
  const stopBegun = new AbortController();

  // Stops the children that exist, webhook first (it may be finishing a deploy), then the API.
  const stopAll = (): Promise<number> =>
    (stopping ??= (async () => {
      stopBegun.abort();
      let failed = false;
      for (const service of [...services].reverse()) {
        if (service.crashed) {
          // Gone already, its crash logged: nothing to stop, and no failure of the stop.
          logger.info({ service: service.name }, 'service not running (it was waiting for its restart)');
          continue;
        }
        const timer = setTimeout(() => service.child.kill('SIGKILL'), STOP_TIMEOUT_MS);
        // A service still loading its modules has no handler yet; a SIGTERM then would kill it.
        await Promise.race([service.handlesSignals, service.exited]);
        if (service.child.exitCode === null && service.child.signalCode === null) service.child.kill('SIGTERM');
        const code = await service.exited;
        clearTimeout(timer);
        if (code !== 0) failed = true;
        logger.info({ service: service.name, code }, 'service stopped');
      }
      return failed ? 1 : 0;
    })());

  // Installed before anything but the API starts, so a signal during start-up stops what has
  // started, cleanly.
  const shutDown = (signal: NodeJS.Signals): void => {
    logger.info({ signal }, 'shutting down');
    void stopAll().then((code) => process.exit(code));
  };
  for (const signal of ['SIGTERM', 'SIGINT'] as const) process.on(signal, shutDown);
  process.off('SIGTERM', remember);
  process.off('SIGINT', remember);
  if (earlySignal) {
    shutDown(earlySignal);
    return;
  }

  // Checked (and built if stale) in a process of its own beside the API's start: a build takes
  // minutes on a busy machine, and this process must keep answering signals meanwhile.
  const webBuilt = withWeb ? buildWeb() : Promise.resolve(0);
  const webhookEntry = withWebhook ? await compiled('services/webhook/src/server.ts') : undefined;
  if (stopping) return;
  let secrets: Record<string, string> = {};
  let adminToken = '';
  if (withWebhook) {
    secrets = developmentSecrets(loadTargets);
    adminToken = process.env.WEBHOOK_ADMIN_TOKEN ?? randomBytes(24).toString('hex');
    services.push(startService('webhook', ['--enable-source-maps', webhookEntry!], { ...process.env, ...secrets, WEBHOOK_ADMIN_TOKEN: adminToken }, /"port":(\d+)/));
  }
  logger.info({ pids: Object.fromEntries(services.map((s) => [s.name, s.child.pid])) }, 'services starting');

  // The site reads its whole configuration at start (services/web/src/config.ts), the API's address
  // included; it starts once the API listens, i.e. is ready (see the top of this file).
  const startWeb = async (apiPort: number): Promise<Service | undefined> => {
    if ((await webBuilt) !== 0 || stopping) throw new Error('the web app could not be built');
    const web = startService(
      'web',
      [webEntry],
      { ...process.env, PORT: String(webPort), HOST: process.env.WEB_HOST ?? '127.0.0.1', API_PUBLIC_URL: `http://localhost:${apiPort}`, API_URL: `http://127.0.0.1:${apiPort}`, PUBLIC_BASE_URL: `http://localhost:${webPort}` },
      /Server listening on http:\/\/[^:]+:(\d+)/,
    );
    services.push(web);
    await web.ready;
    return web;
  };
  let ports: number[];
  try {
    ports = await Promise.all(services.filter((s) => s.name !== 'web').map((s) => s.ready));
  } catch (error) {
    if (stopping) return; // a signal came first; the children are being stopped
    // A child could not start: stop the rest, and exit with its code (2 for a configuration error).
    const codes = services.map((s) => s.child.exitCode);
    await stopAll();
    logger.error({ err: (error as Error).message }, 'start failed');
    process.exit(codes.includes(2) ? 2 : 1);
  }
  if (stopping) return;

  const [apiPort, webhookPort] = ports;
  if (withWeb) {
    try {
      await startWeb(apiPort!);
    } catch (error) {
      if (stopping) return;
      await stopAll();
      logger.error({ err: (error as Error).message }, 'start failed');
      process.exit(1);
    }
    if (stopping) return;
  }
  if (withWebhook) {
    // Printed, not logged: these development secrets are meant for the developer's eyes only and
    // must not end up in a log collector.
    const url = `http://127.0.0.1:${webhookPort}`;
    console.log(
      [
        `webhook server: ${url}/webhook (development secrets, valid for this run only)`,
        ...Object.entries(secrets).map(([name, value]) => `  ${name}=${value}`),
        `  WEBHOOK_ADMIN_TOKEN=${adminToken}  (GET ${url}/deployments)`,
      ].join('\n'),
    );
  }
  const readyMs = Math.round(performance.now() - started);
  logger.info({ readyMs, api: `http://localhost:${apiPort}/api/features`, docs: `http://localhost:${apiPort}/api/docs/` }, 'platform ready');
  if (withWeb) console.log(`web app: http://localhost:${webPort}/  (development sign-in: http://localhost:${webPort}/login)`);

  // A service that ends by itself (a crash) is restarted on the port it had; the others keep running.
  const announcedPort = { api: { PORT: String(apiPort) }, webhook: { WEBHOOK_PORT: String(webhookPort) }, web: {} };
  const supervise = (service: Service, crashesBefore: number): void => {
    void service.exited.then(async () => {
      if (stopping) return;
      const { exitCode: code, signalCode: signal } = service.child;
      if (code === 2) {
        logger.error({ service: service.name, code }, 'service exited with a configuration error; not restarting it, stopping the others');
        await stopAll();
        process.exit(2);
      }
      const healed = performance.now() - service.startedAt >= RESTART_RESET_AFTER_MS;
      const crashes = healed ? 1 : crashesBefore + 1;
      const delayMs = Math.min(RESTART_FIRST_DELAY_MS * 2 ** (crashes - 1), RESTART_MAX_DELAY_MS);
      service.crashed = true;
      logger.error({ service: service.name, code, signal, crashes, restartInMs: delayMs }, 'service exited unexpectedly; restarting it');
      try {
        await sleep(delayMs, undefined, { signal: stopBegun.signal });
      } catch {
        return; // a stop began during the delay
      }
      const restarted = startService(service.name, service.args, { ...service.env, ...announcedPort[service.name] }, service.listening);
      // In its place, so a stop still takes the services in their order.
      services[services.indexOf(service)] = restarted;
      logger.warn({ service: service.name, pid: restarted.child.pid, crashes }, 'service restarting');
      supervise(restarted, crashes);
      restarted.ready.then(
        (port) => !stopping && logger.info({ service: service.name, pid: restarted.child.pid, port }, 'service restarted'),
        () => undefined, // it exited first: supervise has it
      );
    });
  };
  for (const service of services) supervise(service, 0);
});
