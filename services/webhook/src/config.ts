/**
 * The webhook server's configuration: environment variables validated once at start (zod), plus
 * the targets file. Nothing deeper in the service reads process.env.
 */
import { dirname, isAbsolute, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { ConfigError, parseEnv } from '../../shared/config.js';
import { loadTargets, resolveTarget, type ResolvedTarget } from '../../shared/targets.js';
import { largeBodyShare } from './body.js';
import { scriptEnvironment, type DeploySettings } from './deployments/invocation.js';

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
  /** Memory for inflating compressed bodies, summed over all requests in flight. */
  WEBHOOK_INFLATE_BUDGET_BYTES: z.coerce.number().int().positive().default(32 * 1024 * 1024),
  /** Memory for request bodies, compressed or not, summed over all requests in flight (body.ts BodyBudget). */
  WEBHOOK_BODY_BUDGET_BYTES: z.coerce.number().int().positive().default(48 * 1024 * 1024),
  /** Open connections at once; the next one is closed as soon as it is accepted. */
  WEBHOOK_MAX_CONNECTIONS: z.coerce.number().int().positive().default(256),
  /** Time for a whole request, head and body; then 408 and the connection is closed. */
  WEBHOOK_REQUEST_TIMEOUT_SECONDS: seconds.default(30),
  /** Started as root: the server gives up root for this user once the launcher runs. */
  WEBHOOK_USER: z.string().regex(/^[a-z_][a-z0-9_-]{0,31}$/, 'a Unix user name').optional(),
  DEPLOY_ISOLATION: z.enum(['users', 'none']).optional(),
  /** The sandbox of every build step (scripts/host/lib/build-sandbox.sh); production: auto, never none. */
  DEPLOY_BUILD_SANDBOX: z.enum(['auto', 'systemd', 'bwrap', 'none']).optional(),
  /** Extra variables (names, space- or comma-separated) passed on to the deploy script. */
  DEPLOY_ENV_PASS: z
    .string()
    .regex(/^[A-Za-z_][A-Za-z0-9_]*([ ,]+[A-Za-z_][A-Za-z0-9_]*)*$/, 'variable names separated by spaces or commas')
    .optional(),
  RESTART_COMMAND: z.string().optional(),
  KEEP_RELEASES: z.coerce.number().int().positive().optional(),
  /**
   * The shared state of several replicas (journal, queue, delivery ids, failed-authentication counts)
   * in PostgreSQL; unset: the file journal in WEBHOOK_STATE_DIR and counts in memory (one process).
   */
  WEBHOOK_DATABASE_URL: z
    .string()
    .max(2048)
    .regex(/^postgres(ql)?:\/\//, 'a postgres:// or postgresql:// connection URL')
    .optional(),
  /** A replica whose lease has not been renewed for this long is gone: its running deploys are interrupted. */
  WEBHOOK_REPLICA_LEASE_SECONDS: z.coerce.number().int().min(1).max(3600).default(30),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  NODE_ENV: z.string().default('development'),
});

export type WebhookEnv = z.infer<typeof WebhookEnvSchema>;

export interface WebhookConfig {
  port: number;
  host: string;
  targetsFile: string;
  /** The targets with deploy directory, service name and users resolved. */
  targets: ResolvedTarget[];
  deployRoot: string;
  deployTimeoutMs: number;
  /** How the deploy script is called (invocation.ts). */
  deploy: DeploySettings;
  /** Give up root for this user after the launcher started (WEBHOOK_USER). */
  runAs: string | undefined;
  stateDir: string;
  /** PostgreSQL for the state replicas share (WEBHOOK_DATABASE_URL); undefined: the file journal. */
  databaseUrl: string | undefined;
  replicaLeaseMs: number;
  secretsFile: string | undefined;
  adminToken: string | undefined;
  /** What a correctly signed push for a branch without a target gets: 404 (seed) or 202 ignored. */
  unmatchedBranchStatus: 404 | 202;
  maxBodyBytes: number;
  inflateBudgetBytes: number;
  /** Bytes of bodies all requests together may hold at once (body.ts BodyBudget). */
  bodyBudgetBytes: number;
  maxConnections: number;
  requestTimeoutMs: number;
  authFailuresPerMinute: number;
  shutdownGraceMs: number;
  /** Which proxies may set X-Forwarded-For (client address for the rate limit), as Express' `trust proxy` (app.ts). */
  trustProxy: boolean | number | string;
  logLevel: string;
  production: boolean;
}

export function loadWebhookConfig(env: NodeJS.ProcessEnv = process.env): WebhookConfig {
  const parsed = parseEnv(WebhookEnvSchema, env);
  const production = parsed.NODE_ENV === 'production';
  const targets = loadTargets(parsed.TARGETS_FILE).map((t) => resolveTarget(t, parsed.DEPLOY_ROOT));
  const passThrough = parsed.DEPLOY_ENV_PASS?.split(/[ ,]+/).filter(Boolean) ?? [];
  const forbidden = passThrough.filter((name) => name.startsWith('WEBHOOK_') || targets.some((t) => name === t.secret || name === `${t.secret}_PREVIOUS`));
  if (forbidden.length) throw new ConfigError(`DEPLOY_ENV_PASS: ${forbidden.join(', ')} may not reach the deploy script (secrets and server settings stay behind)`);
  if (production && parsed.DEPLOY_BUILD_SANDBOX === 'none') {
    throw new ConfigError('DEPLOY_BUILD_SANDBOX: none is refused with NODE_ENV=production: every build runs in a sandbox (auto, systemd or bwrap)');
  }
  const buildSandbox = parsed.DEPLOY_BUILD_SANDBOX ?? (production ? 'auto' : undefined);
  if (largeBodyShare(parsed.WEBHOOK_BODY_BUDGET_BYTES) < parsed.WEBHOOK_MAX_BODY_BYTES) {
    throw new ConfigError(
      `WEBHOOK_BODY_BUDGET_BYTES: ${parsed.WEBHOOK_BODY_BUDGET_BYTES} leaves bodies over 1 MiB less than WEBHOOK_MAX_BODY_BYTES (${parsed.WEBHOOK_MAX_BODY_BYTES}); ` +
        `a quarter of the budget is kept for small bodies, so it must be at least ${Math.ceil((parsed.WEBHOOK_MAX_BODY_BYTES * 4) / 3)}`,
    );
  }
  return {
    port: parsed.WEBHOOK_PORT,
    host: parsed.WEBHOOK_HOST,
    targetsFile: parsed.TARGETS_FILE,
    targets,
    deployRoot: parsed.DEPLOY_ROOT,
    deployTimeoutMs: parsed.DEPLOY_TIMEOUT_SECONDS * 1000,
    deploy: {
      script: parsed.DEPLOY_SCRIPT,
      rollbackScript: join(repoRoot, 'scripts/host/rollback.sh'),
      isolation: parsed.DEPLOY_ISOLATION ?? (production ? 'users' : 'none'),
      env: { ...scriptEnvironment(env, passThrough), ...(buildSandbox ? { DEPLOY_BUILD_SANDBOX: buildSandbox } : {}) },
    },
    runAs: parsed.WEBHOOK_USER,
    stateDir: parsed.WEBHOOK_STATE_DIR,
    databaseUrl: parsed.WEBHOOK_DATABASE_URL,
    replicaLeaseMs: parsed.WEBHOOK_REPLICA_LEASE_SECONDS * 1000,
    secretsFile: parsed.WEBHOOK_SECRETS_FILE,
    adminToken: parsed.WEBHOOK_ADMIN_TOKEN,
    unmatchedBranchStatus: parsed.WEBHOOK_UNMATCHED_BRANCH === '202' ? 202 : 404,
    maxBodyBytes: parsed.WEBHOOK_MAX_BODY_BYTES,
    inflateBudgetBytes: parsed.WEBHOOK_INFLATE_BUDGET_BYTES,
    bodyBudgetBytes: parsed.WEBHOOK_BODY_BUDGET_BYTES,
    maxConnections: parsed.WEBHOOK_MAX_CONNECTIONS,
    requestTimeoutMs: parsed.WEBHOOK_REQUEST_TIMEOUT_SECONDS * 1000,
    authFailuresPerMinute: parsed.WEBHOOK_AUTH_FAILURES_PER_MINUTE,
    shutdownGraceMs: parsed.WEBHOOK_SHUTDOWN_GRACE_SECONDS * 1000,
    trustProxy: parseTrustProxy(parsed.WEBHOOK_TRUST_PROXY),
    logLevel: parsed.LOG_LEVEL,
    production,
  };
}

function parseTrustProxy(value: string): boolean | number | string {
  if (value === 'true' || value === 'false') return value === 'true';
  return /^\d+$/.test(value) ? Number(value) : value;
}
