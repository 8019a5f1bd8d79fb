/**
 * The webhook server's configuration: environment variables validated once at start (zod), plus
 * the targets file. Nothing deeper in the service reads process.env.
 */
import { dirname, isAbsolute, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { parseEnv } from '../../shared/config.js';
import { loadTargets, type Target } from '../../shared/targets.js';

/** The repository root, so the defaults work whatever the working directory is. */
export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');

const absolutePath = z.string().transform((p) => (isAbsolute(p) ? p : resolve(p)));
const seconds = z.coerce.number().int().positive();

export const WebhookEnvSchema = z.object({
  WEBHOOK_PORT: z.coerce.number().int().min(0).max(65535).default(9321),
  WEBHOOK_HOST: z.string().default('127.0.0.1'),
  TARGETS_FILE: absolutePath.default(join(repoRoot, 'config/targets.yaml')),
  DEPLOY_ROOT: absolutePath.default(join(repoRoot, 'data/sites')),
  DEPLOY_SCRIPT: absolutePath.default(join(repoRoot, 'scripts/deploy-branch.sh')),
  DEPLOY_TIMEOUT_SECONDS: seconds.default(900),
  WEBHOOK_STATE_DIR: absolutePath.default(join(repoRoot, 'data/webhook')),
  WEBHOOK_SECRETS_FILE: absolutePath.optional(),
  WEBHOOK_ADMIN_TOKEN: z.string().min(16, 'must be at least 16 characters').optional(),
  WEBHOOK_UNMATCHED_BRANCH: z.enum(['404', '202']).default('404'),
  WEBHOOK_MAX_BODY_BYTES: z.coerce.number().int().positive().default(25 * 1024 * 1024),
  WEBHOOK_AUTH_FAILURES_PER_MINUTE: z.coerce.number().int().positive().default(30),
  WEBHOOK_SHUTDOWN_GRACE_SECONDS: seconds.default(60),
  WEBHOOK_TRUST_PROXY: z.string().default('loopback'),
  RESTART_COMMAND: z.string().optional(),
  KEEP_RELEASES: z.coerce.number().int().positive().optional(),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  NODE_ENV: z.string().default('development'),
});

export type WebhookEnv = z.infer<typeof WebhookEnvSchema>;

export interface WebhookConfig {
  port: number;
  host: string;
  targetsFile: string;
  targets: Target[];
  deployRoot: string;
  deployScript: string;
  deployTimeoutMs: number;
  stateDir: string;
  secretsFile: string | undefined;
  adminToken: string | undefined;
  /** What a correctly signed push for a branch without a target gets: 404 (seed) or 202 ignored. */
  unmatchedBranchStatus: 404 | 202;
  maxBodyBytes: number;
  authFailuresPerMinute: number;
  shutdownGraceMs: number;
  /** Express `trust proxy`: which proxies may set X-Forwarded-For (client address for the rate limit). */
  trustProxy: boolean | number | string;
  /** Extra environment for the deploy script (RESTART_COMMAND, KEEP_RELEASES when set). */
  deployEnv: Record<string, string>;
  logLevel: string;
  production: boolean;
}

export function loadWebhookConfig(env: NodeJS.ProcessEnv = process.env): WebhookConfig {
  const parsed = parseEnv(WebhookEnvSchema, env);
  const deployEnv: Record<string, string> = {};
  if (parsed.RESTART_COMMAND) deployEnv.RESTART_COMMAND = parsed.RESTART_COMMAND;
  if (parsed.KEEP_RELEASES) deployEnv.KEEP_RELEASES = String(parsed.KEEP_RELEASES);
  return {
    port: parsed.WEBHOOK_PORT,
    host: parsed.WEBHOOK_HOST,
    targetsFile: parsed.TARGETS_FILE,
    targets: loadTargets(parsed.TARGETS_FILE),
    deployRoot: parsed.DEPLOY_ROOT,
    deployScript: parsed.DEPLOY_SCRIPT,
    deployTimeoutMs: parsed.DEPLOY_TIMEOUT_SECONDS * 1000,
    stateDir: parsed.WEBHOOK_STATE_DIR,
    secretsFile: parsed.WEBHOOK_SECRETS_FILE,
    adminToken: parsed.WEBHOOK_ADMIN_TOKEN,
    unmatchedBranchStatus: parsed.WEBHOOK_UNMATCHED_BRANCH === '202' ? 202 : 404,
    maxBodyBytes: parsed.WEBHOOK_MAX_BODY_BYTES,
    authFailuresPerMinute: parsed.WEBHOOK_AUTH_FAILURES_PER_MINUTE,
    shutdownGraceMs: parsed.WEBHOOK_SHUTDOWN_GRACE_SECONDS * 1000,
    trustProxy: parseTrustProxy(parsed.WEBHOOK_TRUST_PROXY),
    deployEnv,
    logLevel: parsed.LOG_LEVEL,
    production: parsed.NODE_ENV === 'production',
  };
}

/** The absolute deploy directory of a target: DEPLOY_ROOT + its directory name. */
export function deployDirOf(config: Pick<WebhookConfig, 'deployRoot'>, target: Pick<Target, 'deployPath'>): string {
  return join(config.deployRoot, target.deployPath);
}

function parseTrustProxy(value: string): boolean | number | string {
  if (value === 'true' || value === 'false') return value === 'true';
  return /^\d+$/.test(value) ? Number(value) : value;
}
