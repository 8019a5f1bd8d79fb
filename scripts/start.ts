/**
 * `npm start`: the platform locally.
 * - the feature API on http://localhost:8080 (PORT); with DATABASE_URL unset it runs on the embedded
 *   PGlite + PostGIS database in DATA_DIR/pglite, created and migrated on first start;
 * - the web app on http://localhost:4321 (WEB_PORT; START_WEB=false leaves it out), built first when
 *   services/web/dist is missing or stale, with the development sign-in at /login;
 * - the deployment webhook server on http://127.0.0.1:9321 (WEBHOOK_PORT) with development secrets
 *   generated for this run and printed once (refused with NODE_ENV=production; set START_WEBHOOK=false
 *   to leave it out).
 * Prints the URLs and how long the start took; Ctrl-C (SIGINT) or SIGTERM stops everything cleanly.
 * Exit codes: 0 stopped cleanly, 1 failed, 2 bad configuration.
 */
import { ConfigError, runMain } from '../services/shared/config.js';
import { createLogger } from '../services/shared/logger.js';
import { startApi } from '../services/api/src/boot.js';
import { loadApiConfig } from '../services/api/src/config.js';
import { startDevelopmentWebhookServer } from '../services/webhook/src/development.js';
import { stopOnSignals } from '../services/shared/shutdown.js';
import { ensureWebBuild, startWebServer } from '../services/web/launch.js';

runMain(async () => {
  const started = performance.now();
  const config = loadApiConfig();
  const logger = createLogger('platform', { level: config.logLevel });
  const withWebhook = process.env.START_WEBHOOK !== 'false';
  const withWeb = process.env.START_WEB !== 'false';
  const webPort = Number(process.env.WEB_PORT ?? 4321);
  if (withWeb) {
    if (!Number.isInteger(webPort) || webPort < 1 || webPort > 65535) throw new ConfigError('WEB_PORT must be a port number');
    // The site's pages call the API from the browser: its origins may read answers and send changes.
    config.cors.origins.push(`http://localhost:${webPort}`, `http://127.0.0.1:${webPort}`);
    ensureWebBuild((message) => console.log(message));
  }

  const api = await startApi(config, logger.child({ component: 'api' }));
  const closers: (() => Promise<void>)[] = [() => api.close()];
  try {
    if (withWebhook) {
      const webhook = await startDevelopmentWebhookServer(process.env);
      closers.unshift(() => webhook.server.close());
      // Printed, not logged: these development secrets are meant for the developer's eyes only and
      // must not end up in a log collector.
      console.log(webhook.banner);
    }
    if (withWeb) {
      const web = await startWebServer({
        port: webPort,
        host: process.env.WEB_HOST ?? '127.0.0.1',
        env: { ...stringEnv(process.env), API_PUBLIC_URL: `http://localhost:${api.port}`, API_URL: `http://127.0.0.1:${api.port}`, PUBLIC_BASE_URL: `http://localhost:${webPort}` },
      });
      closers.unshift(() => web.close());
      console.log(`web app: http://localhost:${webPort}/  (development sign-in: http://localhost:${webPort}/login)`);
    }
  } catch (error) {
    for (const close of closers.slice(0, -1)) await close().catch(() => undefined);
    await api.close();
    throw error;
  }

  const readyMs = Math.round(performance.now() - started);
  logger.info({ readyMs, api: `http://localhost:${api.port}/api/features`, docs: `http://localhost:${api.port}/api/docs/` }, 'platform ready');

  // Closed in order: the webhook server (it may be finishing a deploy) before the API and its database.
  stopOnSignals(logger, () => closers.reduce<Promise<void>>((previous, close) => previous.then(close), Promise.resolve()));
});

function stringEnv(env: NodeJS.ProcessEnv): Record<string, string> {
  return Object.fromEntries(Object.entries(env).filter((entry): entry is [string, string] => entry[1] !== undefined));
}
