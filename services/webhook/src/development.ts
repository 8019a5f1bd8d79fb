/**
 * `npm start`: the webhook server beside the API with secrets generated for this run. Refused with
 * NODE_ENV=production, where secrets come from the mode-600 secrets file.
 */
import { randomBytes } from 'node:crypto';
import { ConfigError } from '../../shared/config.js';
import { loadTargets } from '../../shared/targets.js';
import { loadWebhookConfig } from './config.js';
import { createDevelopmentSecrets } from './secrets.js';
import { startWebhookServer, type RunningWebhookServer } from './boot.js';

export interface DevelopmentWebhookServer {
  server: RunningWebhookServer;
  /** Generated secrets by variable name, and the admin token for /deployments. */
  secrets: Record<string, string>;
  adminToken: string;
  /** Lines to print so a developer can sign test pushes and read /deployments. */
  banner: string;
}

export async function startDevelopmentWebhookServer(env: NodeJS.ProcessEnv = process.env): Promise<DevelopmentWebhookServer> {
  if (env.NODE_ENV === 'production') throw new ConfigError('NODE_ENV=production: refusing to start the webhook server with development secrets');
  const { targetsFile } = loadWebhookConfig({ ...env, WEBHOOK_ADMIN_TOKEN: undefined });
  const targets = loadTargets(targetsFile);
  const secrets = createDevelopmentSecrets(targets, env);
  const adminToken = env.WEBHOOK_ADMIN_TOKEN ?? randomBytes(24).toString('hex');
  const server = await startWebhookServer({ env: { ...env, WEBHOOK_ADMIN_TOKEN: adminToken }, secrets });
  const banner = [
    `webhook server: ${server.url}/webhook (development secrets, valid for this run only)`,
    ...targets.map((t) => `  ${t.secret}=${secrets[t.secret]}  (${t.key}, ${t.provider})`),
    `  WEBHOOK_ADMIN_TOKEN=${adminToken}  (GET ${server.url}/deployments)`,
  ].join('\n');
  return { server, secrets, adminToken, banner };
}
