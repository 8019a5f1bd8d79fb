/**
 * Starts the webhook server: config, secrets, state, queue, HTTP. `npm run webhook` runs this
 * file; scripts/start.ts calls startWebhookServer() beside the API with development secrets.
 * Signals: SIGTERM/SIGINT stop gracefully (running deploys get WEBHOOK_SHUTDOWN_GRACE_SECONDS),
 * SIGHUP re-reads the secrets file (secret rotation without a restart).
 */
import { createServer } from 'node:http';
import { pathToFileURL } from 'node:url';
import type { Logger } from 'pino';
import { ConfigError, runMain } from '../../shared/config.js';
import { closeGracefully, listen } from '../../shared/http-server.js';
import { createLogger } from '../../shared/logger.js';
import { serviceNameOf } from '../../shared/targets.js';
import { createApp } from './app.js';
import { deployDirOf, loadWebhookConfig, type WebhookConfig } from './config.js';
import { DeployLauncher } from './deployments/launcher.js';
import { DeployQueue } from './deployments/queue.js';
import { DeploymentStore } from './deployments/store.js';
import { SecretBook } from './secret-book.js';
import { loadTargetSecrets, resolveTargetSecrets, secretVariableNames } from './secrets.js';
import { stopOnSignals } from '../../shared/shutdown.js';

export { createDevelopmentSecrets } from './secrets.js';
export { startDevelopmentWebhookServer } from './development.js';

export interface StartWebhookOptions {
  /** Environment to configure from (default process.env). */
  env?: NodeJS.ProcessEnv;
  /** Secrets by variable name, instead of the file and environment (development and tests). */
  secrets?: Record<string, string>;
  logger?: Logger;
}

export interface RunningWebhookServer {
  port: number;
  url: string;
  config: WebhookConfig;
  queue: DeployQueue;
  store: DeploymentStore;
  logger: Logger;
  /** Re-read the secrets file; keeps the old secrets (and throws) when the new ones are invalid. */
  reloadSecrets(): void;
  /** Stop accepting requests, let running deploys finish within the grace period, close. */
  close(): Promise<void>;
}

export async function startWebhookServer(options: StartWebhookOptions = {}): Promise<RunningWebhookServer> {
  const env = options.env ?? process.env;
  const config = loadWebhookConfig(env);
  const logger = options.logger ?? createLogger('webhook', { level: config.logLevel });
  if (options.secrets && config.production) {
    throw new ConfigError('NODE_ENV=production: in-memory webhook secrets are refused; set WEBHOOK_SECRETS_FILE');
  }
  const loadSecrets = () =>
    options.secrets ? resolveTargetSecrets(config.targets, options.secrets) : loadTargetSecrets(config.targets, config.secretsFile, env);
  const secrets = new SecretBook(loadSecrets());
  if (!config.adminToken) logger.warn('WEBHOOK_ADMIN_TOKEN is not set: /deployments answers 401 to everyone');

  const store = await DeploymentStore.open(config.stateDir, logger);
  const launcher = new DeployLauncher(logger);
  launcher.start();
  const queue = new DeployQueue({
    launcher,
    store,
    logger,
    deployScript: config.deployScript,
    deployTimeoutMs: config.deployTimeoutMs,
    deployDirOf: (target) => deployDirOf(config, target),
    serviceNameOf,
    scriptEnv: scriptEnvironment(env, config),
    targets: config.targets,
  });
  await queue.resume();

  const server = createServer(createApp({ config, secrets, queue, store, logger }));
  server.requestTimeout = 120_000; // a 25 MB body on a slow link, not forever
  server.headersTimeout = 20_000;
  let port: number;
  try {
    port = await listen(server, config.port, config.host);
  } catch (error) {
    launcher.close(); // the helper would otherwise keep this process alive
    await store.close();
    throw error;
  }
  logger.info({ port, host: config.host, targets: config.targets.map((t) => t.key) }, 'webhook server listening');

  let closing: Promise<void> | null = null;
  return {
    port,
    url: `http://${config.host.includes(':') ? `[${config.host}]` : config.host}:${port}`,
    config,
    queue,
    store,
    logger,
    reloadSecrets() {
      secrets.replace(loadSecrets());
      logger.info('webhook secrets reloaded');
    },
    close() {
      closing ??= (async () => {
        const http = closeGracefully(server, 5_000);
        await queue.shutdown(config.shutdownGraceMs);
        launcher.close();
        await http;
        await store.close();
        logger.info('webhook server stopped');
      })();
      return closing;
    },
  };
}

/**
 * The deploy script's environment: the server's, minus every secret and the admin token (a build
 * runs code from the pushed branch), plus the configured pass-through variables.
 */
export function scriptEnvironment(env: NodeJS.ProcessEnv, config: WebhookConfig): NodeJS.ProcessEnv {
  const scriptEnv: NodeJS.ProcessEnv = { ...env, ...config.deployEnv };
  for (const name of [...secretVariableNames(config.targets), 'WEBHOOK_ADMIN_TOKEN', 'WEBHOOK_SECRETS_FILE']) delete scriptEnv[name];
  return scriptEnv;
}

async function main(): Promise<void> {
  const running = await startWebhookServer();
  const { logger } = running;
  stopOnSignals(logger, () => running.close());
  process.on('SIGHUP', () => {
    try {
      running.reloadSecrets();
    } catch (error) {
      logger.error({ err: (error as Error).message }, 'secrets reload failed; keeping the previous secrets');
    }
  });
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) runMain(main);
