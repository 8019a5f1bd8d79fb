import { resolve } from 'node:path';
import { z } from 'zod';
import { parseEnv } from '../../shared/config.js';

/**
 * The API's environment, parsed once at start. A bad value stops the process with a message naming
 * the variable (runMain prints it and exits 2). Nothing deeper in the code reads process.env.
 */
const postgresUrl = z
  .string()
  .regex(/^postgres(ql)?:\/\/\S+$/, 'a postgres:// or postgresql:// connection string');

export const ApiEnvSchema = z
  .object({
    DATABASE_URL: postgresUrl.optional(),
    PORT: z.coerce.number().int().min(0).max(65535).default(8080),
    AUTH_ISSUER: z.string().min(1).optional(),
    AUTH_JWKS_URL: z.url({ protocol: /^https?$/, error: 'an http(s) URL of a JSON Web Key Set' }).optional(),
    AUTH_AUDIENCE: z.string().min(1).optional(),
    NODE_ENV: z.enum(['development', 'test', 'production']).default('development'),
    DATA_DIR: z.string().min(1).default('./data'),
    LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
    RATE_LIMIT_WRITES_PER_MINUTE: z.coerce.number().int().min(0).default(600),
    // Ory (identity): each optional, so the API also runs with JWTs alone.
    KRATOS_PUBLIC_URL: z.url({ protocol: /^https?$/, error: 'an http(s) URL of the Kratos public API' }).optional(),
    KRATOS_ADMIN_URL: z.url({ protocol: /^https?$/, error: 'an http(s) URL of the Kratos admin API' }).optional(),
    HYDRA_ADMIN_URL: z.url({ protocol: /^https?$/, error: 'an http(s) URL of the Hydra admin API' }).optional(),
    SESSION_CACHE_SECONDS: z.coerce.number().int().min(0).max(300).default(15),
    INTROSPECTION_CACHE_SECONDS: z.coerce.number().int().min(0).max(3600).default(300),
    CORS_ORIGINS: z
      .string()
      .default('')
      .transform((value) => value.split(',').map((origin) => origin.trim()).filter(Boolean))
      .pipe(z.array(z.url({ protocol: /^https?$/, error: 'a comma-separated list of origins like https://app.example.org' }).refine((origin) => /^https?:\/\/[^/]+\/?$/.test(origin), 'an origin (scheme://host[:port]) without a path'))),
  })
  .superRefine((env, ctx) => {
    // The development signing key must never guard a production deployment.
    if (env.NODE_ENV === 'production' && !env.AUTH_JWKS_URL) {
      ctx.addIssue({ code: 'custom', path: ['AUTH_JWKS_URL'], message: 'required when NODE_ENV=production' });
    }
    if (env.NODE_ENV === 'production' && !env.DATABASE_URL) {
      ctx.addIssue({ code: 'custom', path: ['DATABASE_URL'], message: 'required when NODE_ENV=production (the embedded database is for development)' });
    }
  });

export interface ApiConfig {
  /** Unset: the embedded PGlite database under dataDir. */
  databaseUrl: string | undefined;
  port: number;
  production: boolean;
  /** Absolute path of the data folder (embedded database, development signing key). */
  dataDir: string;
  logLevel: string;
  /** Changes (POST/PUT/DELETE) per client address and minute; 0 disables the limit. */
  rateLimit: { writesPerMinute: number };
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
}

export function loadApiConfig(env: NodeJS.ProcessEnv = process.env): ApiConfig {
  const parsed = parseEnv(ApiEnvSchema, env);
  return {
    databaseUrl: parsed.DATABASE_URL,
    port: parsed.PORT,
    production: parsed.NODE_ENV === 'production',
    dataDir: resolve(parsed.DATA_DIR),
    logLevel: parsed.LOG_LEVEL,
    rateLimit: { writesPerMinute: parsed.RATE_LIMIT_WRITES_PER_MINUTE },
    auth: { issuer: parsed.AUTH_ISSUER, jwksUrl: parsed.AUTH_JWKS_URL, audience: parsed.AUTH_AUDIENCE },
    identity: {
      kratosPublicUrl: parsed.KRATOS_PUBLIC_URL,
      kratosAdminUrl: parsed.KRATOS_ADMIN_URL,
      hydraAdminUrl: parsed.HYDRA_ADMIN_URL,
      sessionCacheMs: parsed.SESSION_CACHE_SECONDS * 1000,
      introspectionCacheMs: parsed.INTROSPECTION_CACHE_SECONDS * 1000,
    },
    cors: { origins: parsed.CORS_ORIGINS.map((origin) => new URL(origin).origin) },
  };
}
