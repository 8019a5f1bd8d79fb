import { resolve } from 'node:path';
import proxyAddress from 'proxy-addr';
import { z } from 'zod';
import { parseEnv } from '../../shared/config.js';
import { BboxSchema, type Bbox } from '../../shared/features/schema.js';
import { parseAal2Roles, type AssurancePolicy } from './auth/assurance.js';
import { checkExportsEnv, exportsEnvShape, exportsSettingsFrom, type ExportsSettings } from './exports/config.js';

/**
 * The API's environment, parsed once at start. A bad value stops the process with a message naming
 * the variable (runMain prints it and exits 2). Nothing deeper in the code reads process.env.
 */
const postgresUrl = z
  .string()
  .regex(/^postgres(ql)?:\/\/\S+$/, 'a postgres:// or postgresql:// connection string');

/** What every API entry point reads: where the database is, where local state lives, how to log. */
const baseEnvShape = {
  DATABASE_URL: postgresUrl.optional(),
  NODE_ENV: z.enum(['development', 'test', 'production']).default('development'),
  DATA_DIR: z.string().min(1).default('./data'),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
};

/** The QC worker's variables (in the API process or stand-alone, docs/qc.md). */
const workerEnvShape = {
  ...exportsEnvShape,
  WORKER_ENABLED: z.enum(['true', 'false', '1', '0']).default('true').transform((v) => v === 'true' || v === '1'),
  WORKER_CONCURRENCY: z.coerce.number().int().min(1).max(64).default(2),
  WORKER_POLL_INTERVAL_MS: z.coerce.number().int().min(50).max(60_000).default(2_000),
  WORKER_HEARTBEAT_MS: z.coerce.number().int().min(100).max(300_000).default(10_000),
  QC_JOB_MAX_ATTEMPTS: z.coerce.number().int().min(1).max(50).default(12),
};

/** The worker's settings from its parsed variables: the API's and the stand-alone worker's alike. */
function workerSettingsFrom(parsed: z.infer<z.ZodObject<typeof workerEnvShape>>): ApiConfig['worker'] {
  return {
    enabled: parsed.WORKER_ENABLED,
    concurrency: parsed.WORKER_CONCURRENCY,
    pollIntervalMs: parsed.WORKER_POLL_INTERVAL_MS,
    heartbeatMs: parsed.WORKER_HEARTBEAT_MS,
  };
}

/** One entry of API_TRUST_PROXY as proxy-addr compiles it: a name it knows, an address or a subnet. */
function isProxyAddrEntry(entry: string): boolean {
  // A bare number is a hop count to Express (and proxy-addr would read it as an IPv4 address).
  if (/^\d+$/.test(entry)) return false;
  try {
    proxyAddress.compile(entry);
    return true;
  } catch {
    return false;
  }
}

function requireDatabaseInProduction(env: { NODE_ENV: string; DATABASE_URL?: string | undefined }, ctx: z.RefinementCtx): void {
  if (env.NODE_ENV === 'production' && !env.DATABASE_URL) {
    ctx.addIssue({ code: 'custom', path: ['DATABASE_URL'], message: 'required when NODE_ENV=production (the embedded database is for development)' });
  }
}

/**
 * `npm run migrate` (the stack's api-migrate job): only the database, the data folder and the log
 * level. The job gets NODE_ENV=production and DATABASE_URL and nothing else, and must start with that.
 */
export const MigrateEnvSchema = z.object(baseEnvShape).superRefine(requireDatabaseInProduction);

/** The stand-alone QC worker: database, exports and worker settings; no HTTP, no authentication. */
export const WorkerEnvSchema = z.object({ ...baseEnvShape, ...workerEnvShape }).superRefine((env, ctx) => {
  checkExportsEnv(env, ctx);
  requireDatabaseInProduction(env, ctx);
});

export const ApiEnvSchema = z
  .object({
    ...baseEnvShape,
    PORT: z.coerce.number().int().min(0).max(65535).default(8080),
    AUTH_ISSUER: z.string().min(1).optional(),
    AUTH_JWKS_URL: z.url({ protocol: /^https?$/, error: 'an http(s) URL of a JSON Web Key Set' }).optional(),
    AUTH_AUDIENCE: z.string().min(1).optional(),
    RATE_LIMIT_WRITES_PER_MINUTE: z.coerce.number().int().min(0).default(600),
    // Proxies whose X-Forwarded-For names the client (the change limit's key for callers without
    // credentials): proxy-addr names (loopback, linklocal, uniquelocal), addresses and subnets. Never
    // `true` or a hop count, which would believe any peer. Unset: no proxy, the peer is the client.
    API_TRUST_PROXY: z
      .string()
      .default('')
      .transform((value) => value.split(',').map((entry) => entry.trim()).filter(Boolean))
      .pipe(z.array(z.string().refine(isProxyAddrEntry, 'a comma-separated list of loopback, linklocal, uniquelocal, IP addresses or subnets (never true or a hop count)'))),
    // QC side effects (docs/qc.md): exports, notices, and the worker that runs them.
    ...workerEnvShape,
    // The review check outside_city (docs/qc.md): minLon,minLat,maxLon,maxLat of the city; unset skips it.
    QC_CITY_EXTENT: BboxSchema.refine((b) => b.minLon <= b.maxLon, 'minLon must not exceed maxLon').optional(),
    // Ory (identity): each optional, so the API also runs with JWTs alone.
    KRATOS_PUBLIC_URL: z.url({ protocol: /^https?$/, error: 'an http(s) URL of the Kratos public API' }).optional(),
    KRATOS_ADMIN_URL: z.url({ protocol: /^https?$/, error: 'an http(s) URL of the Kratos admin API' }).optional(),
    HYDRA_ADMIN_URL: z.url({ protocol: /^https?$/, error: 'an http(s) URL of the Hydra admin API' }).optional(),
    SESSION_CACHE_SECONDS: z.coerce.number().int().min(0).max(300).default(15),
    INTROSPECTION_CACHE_SECONDS: z.coerce.number().int().min(0).max(3600).default(300),
    // Roles whose approvals, rejections, deletions, role changes and admin calls need a second factor (docs/identity.md).
    AUTH_AAL2_ROLES: z.string().default('reviewer,admin').refine((v) => v.split(',').map((r) => r.trim()).every((r) => ['', 'none', 'guest', 'contributor', 'reviewer', 'admin'].includes(r)), 'comma-separated roles (guest, contributor, reviewer, admin) or none'),
    CORS_ORIGINS: z
      .string()
      .default('')
      .transform((value) => value.split(',').map((origin) => origin.trim()).filter(Boolean))
      .pipe(z.array(z.url({ protocol: /^https?$/, error: 'a comma-separated list of origins like https://app.example.org' }).refine((origin) => /^https?:\/\/[^/]+\/?$/.test(origin), 'an origin (scheme://host[:port]) without a path'))),
  })
  .superRefine((env, ctx) => {
    checkExportsEnv(env, ctx);
    // The development signing key must never guard a production deployment: production checks access
    // tokens either as JWTs (AUTH_JWKS_URL) or as opaque Hydra tokens by introspection (HYDRA_ADMIN_URL).
    if (env.NODE_ENV === 'production' && !env.AUTH_JWKS_URL && !env.HYDRA_ADMIN_URL) {
      ctx.addIssue({ code: 'custom', path: ['AUTH_JWKS_URL'], message: 'AUTH_JWKS_URL (JWT access tokens) or HYDRA_ADMIN_URL (opaque access tokens) is required when NODE_ENV=production' });
    }
    requireDatabaseInProduction(env, ctx);
  });

export interface ApiConfig {
  /** Unset: the embedded PGlite database under dataDir. */
  databaseUrl: string | undefined;
  port: number;
  production: boolean;
  /** Absolute path of the data folder (embedded database, development signing key). */
  dataDir: string;
  logLevel: string;
  /**
   * Changes (POST/PUT/PATCH/DELETE) per caller and minute, 0 disables the limit; the caller is the
   * authenticated user, else the client address (http/rate-limit-key.ts). `trustProxy`: the proxies
   * whose X-Forwarded-For names that address (unset or empty: none).
   */
  rateLimit: { writesPerMinute: number; trustProxy?: string[] };
  auth: { issuer: string | undefined; jwksUrl: string | undefined; audience: string | undefined };
  /** Ory Kratos/Hydra; unset URLs switch the matching credential type off. */
  identity: {
    kratosPublicUrl: string | undefined;
    kratosAdminUrl: string | undefined;
    hydraAdminUrl: string | undefined;
    sessionCacheMs: number;
    introspectionCacheMs: number;
  };
  /** Origins allowed to call the API from a browser (CORS) and to send cookie-authenticated changes. */
  cors: { origins: string[] };
  /** Which roles need a second factor (aal2) for sensitive actions (auth/assurance.ts). */
  assurance: AssurancePolicy;
  /** QC side effects: OSM/Wikibase exports, reviewer and agency notices (docs/qc.md). */
  exports: ExportsSettings;
  /** The QC worker; `enabled` runs it inside the API process. */
  worker: { enabled: boolean; concurrency: number; pollIntervalMs: number; heartbeatMs: number };
  qc: { maxAttempts: number; cityExtent?: Bbox | undefined };
}

export function loadApiConfig(env: NodeJS.ProcessEnv = process.env): ApiConfig {
  const parsed = parseEnv(ApiEnvSchema, env);
  return {
    databaseUrl: parsed.DATABASE_URL,
    port: parsed.PORT,
    production: parsed.NODE_ENV === 'production',
    dataDir: resolve(parsed.DATA_DIR),
    logLevel: parsed.LOG_LEVEL,
    rateLimit: { writesPerMinute: parsed.RATE_LIMIT_WRITES_PER_MINUTE, trustProxy: parsed.API_TRUST_PROXY },
    auth: { issuer: parsed.AUTH_ISSUER, jwksUrl: parsed.AUTH_JWKS_URL, audience: parsed.AUTH_AUDIENCE },
    identity: {
      kratosPublicUrl: parsed.KRATOS_PUBLIC_URL,
      kratosAdminUrl: parsed.KRATOS_ADMIN_URL,
      hydraAdminUrl: parsed.HYDRA_ADMIN_URL,
      sessionCacheMs: parsed.SESSION_CACHE_SECONDS * 1000,
      introspectionCacheMs: parsed.INTROSPECTION_CACHE_SECONDS * 1000,
    },
    cors: { origins: parsed.CORS_ORIGINS.map((origin) => new URL(origin).origin) },
    assurance: { aal2Roles: parseAal2Roles(parsed.AUTH_AAL2_ROLES) },
    exports: exportsSettingsFrom(parsed),
    worker: workerSettingsFrom(parsed),
    qc: { maxAttempts: parsed.QC_JOB_MAX_ATTEMPTS, cityExtent: parsed.QC_CITY_EXTENT },
  };
}

export interface MigrateConfig {
  databaseUrl: string | undefined;
  dataDir: string;
  logLevel: string;
}

export function loadMigrateConfig(env: NodeJS.ProcessEnv = process.env): MigrateConfig {
  const parsed = parseEnv(MigrateEnvSchema, env);
  return { databaseUrl: parsed.DATABASE_URL, dataDir: resolve(parsed.DATA_DIR), logLevel: parsed.LOG_LEVEL };
}

export type WorkerConfig = MigrateConfig & Pick<ApiConfig, 'exports' | 'worker' | 'qc'>;

export function loadWorkerConfig(env: NodeJS.ProcessEnv = process.env): WorkerConfig {
  const parsed = parseEnv(WorkerEnvSchema, env);
  return {
    databaseUrl: parsed.DATABASE_URL,
    dataDir: resolve(parsed.DATA_DIR),
    logLevel: parsed.LOG_LEVEL,
    exports: exportsSettingsFrom(parsed),
    worker: workerSettingsFrom(parsed),
    qc: { maxAttempts: parsed.QC_JOB_MAX_ATTEMPTS },
  };
}
