import { z } from 'zod';
import { parseEnv } from '../../../services/shared/config.js';

/**
 * Configuration of the login/consent/logout app, parsed once at start from the environment.
 * Every variable is documented in docs/identity.md.
 */
const url = z.url({ protocol: /^https?$/ }).transform((u) => u.replace(/\/+$/, ''));
const positiveInt = z.coerce.number().int().positive();

export const IdentityAppEnvSchema = z.object({
  IDENTITY_PORT: z.coerce.number().int().min(0).max(65535).default(4455),
  IDENTITY_AUTH_URL: url,
  IDENTITY_APP_URL: url,
  /** The official Kratos self-service UI; second-factor (aal2) logins are handed to it. */
  IDENTITY_ACCOUNTS_URL: url.optional(),
  KRATOS_PUBLIC_URL: url,
  /** Kratos' public API as seen from this container (defaults to KRATOS_PUBLIC_URL). */
  KRATOS_PUBLIC_INTERNAL_URL: url.optional(),
  KRATOS_ADMIN_URL: url,
  HYDRA_ADMIN_URL: url,
  IDENTITY_COOKIE_SECRET: z.string().min(32, 'must be at least 32 characters'),
  IDENTITY_REMEMBER_SECONDS: positiveInt.default(30 * 24 * 3600),
  IDENTITY_LOGIN_LIMIT_PER_IP: positiveInt.default(30),
  IDENTITY_LOGIN_LIMIT_PER_ACCOUNT: positiveInt.default(5),
  IDENTITY_LOGIN_LIMIT_WINDOW_SECONDS: positiveInt.default(15 * 60),
  /** Express `trust proxy`: the hops in front of the app (Caddy) whose X-Forwarded-For is believed. */
  IDENTITY_TRUST_PROXY: z.string().default('loopback'),
  /**
   * The login app's own PostgreSQL database for the limiters' counters (rate-limit-store.ts): every
   * replica then counts against one budget. Unset: counted in this process, right for one replica only.
   */
  LOGIN_DATABASE_URL: z.url({ protocol: /^postgres(ql)?$/ }).optional(),
  /** How many replicas of the app run (the deployment says so); more than one needs LOGIN_DATABASE_URL. */
  IDENTITY_REPLICAS: positiveInt.default(1),
  LOG_LEVEL: z.string().default('info'),
}).superRefine((e, ctx) => {
  // N replicas counting in memory would let a client make N times every limit: refused, not warned.
  if (e.IDENTITY_REPLICAS > 1 && !e.LOGIN_DATABASE_URL) {
    ctx.addIssue({ code: 'custom', path: ['LOGIN_DATABASE_URL'], message: `required when IDENTITY_REPLICAS is ${e.IDENTITY_REPLICAS}: without it each replica keeps its own login limits, and a client gets ${e.IDENTITY_REPLICAS} times each` });
  }
});

export interface IdentityAppConfig {
  port: number;
  authUrl: string;
  appUrl: string;
  accountsUrl?: string;
  kratosPublicUrl: string;
  kratosPublicInternalUrl: string;
  kratosAdminUrl: string;
  hydraAdminUrl: string;
  cookieSecret: string;
  rememberSeconds: number;
  loginLimit: { perIp: number; perAccount: number; windowMs: number };
  /** The limiters' shared counters (LOGIN_DATABASE_URL); unset: in process memory. */
  loginDatabaseUrl?: string;
  trustProxy: string;
  logLevel: string;
  /** Cookies get Secure and the __Host- prefix whenever the app is served over https. */
  secureCookies: boolean;
}

export function loadIdentityAppConfig(env: NodeJS.ProcessEnv = process.env): IdentityAppConfig {
  const e = parseEnv(IdentityAppEnvSchema, env);
  return {
    port: e.IDENTITY_PORT,
    authUrl: e.IDENTITY_AUTH_URL,
    appUrl: e.IDENTITY_APP_URL,
    ...(e.IDENTITY_ACCOUNTS_URL ? { accountsUrl: e.IDENTITY_ACCOUNTS_URL } : {}),
    kratosPublicUrl: e.KRATOS_PUBLIC_URL,
    kratosPublicInternalUrl: e.KRATOS_PUBLIC_INTERNAL_URL ?? e.KRATOS_PUBLIC_URL,
    kratosAdminUrl: e.KRATOS_ADMIN_URL,
    hydraAdminUrl: e.HYDRA_ADMIN_URL,
    cookieSecret: e.IDENTITY_COOKIE_SECRET,
    rememberSeconds: e.IDENTITY_REMEMBER_SECONDS,
    loginLimit: { perIp: e.IDENTITY_LOGIN_LIMIT_PER_IP, perAccount: e.IDENTITY_LOGIN_LIMIT_PER_ACCOUNT, windowMs: e.IDENTITY_LOGIN_LIMIT_WINDOW_SECONDS * 1000 },
    ...(e.LOGIN_DATABASE_URL ? { loginDatabaseUrl: e.LOGIN_DATABASE_URL } : {}),
    trustProxy: e.IDENTITY_TRUST_PROXY,
    logLevel: e.LOG_LEVEL,
    secureCookies: e.IDENTITY_AUTH_URL.startsWith('https://'),
  };
}
