/**
 * The webhook server factory: config, launcher, privileges, secrets, state, deployer, HTTP. The state
 * is the file journal in WEBHOOK_STATE_DIR (one process), or with WEBHOOK_DATABASE_URL PostgreSQL,
 * shared by every replica (journal, queue, delivery ids, failed-authentication counts).
 * server.ts (the entry point) and development.ts (`npm start`) call startWebhookServer().
 *
 * Order matters for privilege separation: the deploy launcher is forked first, while the process
 * may still be root (it runs the deploy scripts, which run each build as the target's own user);
 * then, with WEBHOOK_USER, this process gives up root before it reads a secret or opens a socket.
 */
import { execFileSync } from 'node:child_process';
import type { Logger } from 'pino';
import { ConfigError } from '../../shared/config.js';
import { sharedRepositoryWarnings } from '../../shared/targets.js';
import { closeGracefully, listen } from '../../shared/http-server.js';
import { createLogger } from '../../shared/logger.js';
import type pg from 'pg';
import { createApp } from './app.js';
import { postgresFailureCounter, type FailureCounter } from './auth-failure-limiter.js';
import { loadWebhookConfig, type WebhookConfig } from './config.js';
import { openWebhookDatabase } from './database.js';
import { Deployer } from './deployments/deployer.js';
import { FileJournal } from './deployments/file-journal.js';
import { launcherPlan } from './deployments/invocation.js';
import type { DeploymentJournal } from './deployments/journal.js';
import { DeployLauncher } from './deployments/launcher.js';
import { PostgresJournal } from './deployments/postgres-journal.js';
import type { DeploymentStore } from './deployments/store.js';
import { SecretBook } from './secret-book.js';
import { loadTargetSecrets, resolveTargetSecrets } from './secrets.js';

export interface StartWebhookOptions {
  /** Environment to configure from (default process.env). */
  env?: NodeJS.ProcessEnv;
  /** Secrets by variable name, instead of the file and environment (development and tests). */
  secrets?: Record<string, string>;
  logger?: Logger;
  /**
   * Called when the server cannot go on safely and must be restarted by its service manager: the
   * root deploy launcher died after this process gave up root (WEBHOOK_USER). server.ts exits 1.
   */
  onFatal?: (reason: string) => void;
}

export interface RunningWebhookServer {
  port: number;
  url: string;
  config: WebhookConfig;
  deployer: Deployer;
  /** The deployments: the file journal, or PostgreSQL with WEBHOOK_DATABASE_URL. */
  journal: DeploymentJournal;
  /**
   * The file journal itself, read at once (tests). With WEBHOOK_DATABASE_URL there is none, and
   * reading this throws: read `journal`.
   */
  readonly store: DeploymentStore;
  logger: Logger;
  /** Re-read the secrets file; keeps the old secrets (and throws) when the new ones are invalid. */
  reloadSecrets(): void;
  /** Stop accepting requests, let running deploys finish within the grace period, close. */
  close(): Promise<void>;
}

const isRoot = (): boolean => process.getuid?.() === 0;

/** Become `user` (and its primary group, and only its groups) for good. */
function dropPrivileges(user: string): void {
  let gid: number;
  try {
    gid = Number(execFileSync('id', ['-g', user], { encoding: 'utf8' }).trim());
  } catch {
    throw new ConfigError(`WEBHOOK_USER: no user ${user}; create it with npm run host -- users --apply`);
  }
  process.setgroups!([gid]); // its own group only: no supplementary group of root's
  process.setgid!(gid);
  process.setuid!(user);
  if (isRoot()) throw new ConfigError(`WEBHOOK_USER: could not give up root for ${user}`);
}

export async function startWebhookServer(options: StartWebhookOptions = {}): Promise<RunningWebhookServer> {
  const env = options.env ?? process.env;
  const config = loadWebhookConfig(env);
  const logger = options.logger ?? createLogger('webhook', { level: config.logLevel });
  if (options.secrets && config.production) {
    throw new ConfigError('NODE_ENV=production: in-memory webhook secrets are refused; set WEBHOOK_SECRETS_FILE');
  }
  if (config.deploy.isolation === 'users' && !isRoot()) {
    throw new ConfigError('DEPLOY_ISOLATION=users: builds run as each target\'s own user, so the server must start as root and give up root through WEBHOOK_USER (or set DEPLOY_ISOLATION=none for development)');
  }
  if (config.runAs && !isRoot()) throw new ConfigError('WEBHOOK_USER is set, but the server was not started as root');
  if (config.production && isRoot() && !config.runAs) {
    throw new ConfigError('NODE_ENV=production as root: set WEBHOOK_USER, the user the server runs as once the deploy launcher is started');
  }
  if (config.deploy.isolation === 'none') logger.warn('DEPLOY_ISOLATION=none: builds run as the launcher\'s user and can read what it can');
  for (const warning of sharedRepositoryWarnings(config.targets)) logger.warn({ check: 'shared-repository' }, warning);

  const launcher = new DeployLauncher(logger, launcherPlan(config.deploy, config.targets));
  launcher.start();
  let journal: DeploymentJournal | undefined;
  let pool: pg.Pool | undefined;
  let secrets: SecretBook;
  const loadSecrets = () =>
    options.secrets ? resolveTargetSecrets(config.targets, options.secrets) : loadTargetSecrets(config.targets, config.secretsFile, env);
  try {
    if (config.runAs) {
      dropPrivileges(config.runAs);
      // A launcher forked from now on would not be root: no isolated deploy could run, and the
      // dead launcher's deploys could not be ended. Stop, so the service manager starts it all
      // again as root (Restart=on-failure); queued deploys are resumed from the journal.
      launcher.onUnexpectedExit = (code, signal) => {
        logger.fatal({ code, signal }, 'the root deploy launcher exited after root was given up; stopping so the service manager restarts the server');
        options.onFatal?.('deploy launcher lost');
      };
    }
    secrets = new SecretBook(loadSecrets());
    if (config.databaseUrl) {
      pool = await openWebhookDatabase(config.databaseUrl, logger);
      journal = await PostgresJournal.open(pool, { logger, leaseMs: config.replicaLeaseMs });
    } else {
      journal = await FileJournal.open(config.stateDir, logger);
    }
  } catch (error) {
    launcher.close();
    await pool?.end().catch(() => undefined);
    throw error;
  }
  if (!config.adminToken) logger.warn('WEBHOOK_ADMIN_TOKEN is not set: /deployments answers 401 to everyone');

  const openJournal = journal;
  const closeState = async (): Promise<void> => {
    await openJournal.close();
    await pool?.end();
  };
  const deployer = new Deployer({ launcher, journal, logger, targets: config.targets, deployTimeoutMs: config.deployTimeoutMs, leaseMs: config.replicaLeaseMs });
  try {
    await deployer.resume();
  } catch (error) {
    launcher.close();
    await closeState();
    throw error;
  }

  const failureCounter: FailureCounter | undefined = pool ? postgresFailureCounter(pool) : undefined;
  const app = createApp({ config, secrets, deployer, journal, failureCounter, logger });
  const server = app.server;
  let port: number;
  try {
    await app.ready();
    port = await listen(server, config.port, config.host);
  } catch (error) {
    await deployer.shutdown(0);
    launcher.close(); // the helper would otherwise keep this process alive
    await closeState();
    throw error;
  }
  logger.info({ port, host: config.host, targets: config.targets.map((t) => t.key), isolation: config.deploy.isolation }, 'webhook server listening');
  // A parent (npm start) learns the port here too, whatever LOG_LEVEL hides.
  process.send?.({ listening: port });

  let closing: Promise<void> | null = null;
  return {
    port,
    url: `http://${config.host.includes(':') ? `[${config.host}]` : config.host}:${port}`,
    config,
    deployer,
    journal: openJournal,
    get store(): DeploymentStore {
      if (openJournal instanceof FileJournal) return openJournal.store;
      throw new Error('WEBHOOK_DATABASE_URL is set: the deployments are in PostgreSQL, read them through `journal`');
    },
    logger,
    reloadSecrets() {
      secrets.replace(loadSecrets());
      logger.info('webhook secrets reloaded');
    },
    close() {
      closing ??= (async () => {
        const http = closeGracefully(server, 5_000);
        await deployer.shutdown(config.shutdownGraceMs);
        launcher.close();
        await http;
        await app.close();
        await closeState();
        logger.info('webhook server stopped');
      })();
      return closing;
    },
  };
}
