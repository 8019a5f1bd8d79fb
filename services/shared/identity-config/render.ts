import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { ConfigError } from '../config.js';

/**
 * Rendering of the Kratos and Hydra configuration templates (identity/config in this repository).
 *
 * The ground floor reads no package's files by its own path: every function that reads a template or a
 * mapper takes the folder from its caller (`CONFIG_DIR` of identity/src/config/config-dir.ts for the
 * identity tools and tests, the stack's `identityConfigDir` for infra/).
 *
 * The templates hold `${NAME}` and `${NAME:-default}` placeholders for everything that differs between
 * deployments but is not secret (domains, URLs). Secrets and DSNs never appear in a file: the containers
 * get them as the Ory services' own environment variables, which Kratos and Hydra merge over the file at
 * start. `effectiveConfig` reproduces that merge so the config check sees what the service will see.
 */

export type Env = Readonly<Record<string, string | undefined>>;

export type ServiceName = 'kratos' | 'hydra';

/**
 * A secret or DSN: the variable the operator sets for our tooling, the variable the container receives
 * (Ory's own name, see configx: lower-cased, `_` → `.`), and the config key it lands on.
 */
export interface SecretVariable {
  env: string;
  containerEnv: string;
  key: string;
  kind: 'string' | 'list';
  meaning: string;
}

export const SECRET_VARIABLES: Record<ServiceName, readonly SecretVariable[]> = {
  kratos: [
    { env: 'KRATOS_DSN', containerEnv: 'DSN', key: 'dsn', kind: 'string', meaning: 'PostgreSQL URL of the Kratos database (its own database, not Hydra\'s)' },
    { env: 'KRATOS_SECRETS_DEFAULT', containerEnv: 'SECRETS_DEFAULT', key: 'secrets.default', kind: 'list', meaning: 'signing secrets, newest first (comma-separated), each ≥ 16 characters' },
    { env: 'KRATOS_SECRETS_COOKIE', containerEnv: 'SECRETS_COOKIE', key: 'secrets.cookie', kind: 'list', meaning: 'cookie secrets, newest first, each ≥ 16 characters' },
    { env: 'KRATOS_SECRETS_CIPHER', containerEnv: 'SECRETS_CIPHER', key: 'secrets.cipher', kind: 'list', meaning: 'encryption secrets, newest first, each exactly 32 characters' },
    { env: 'KRATOS_SMTP_URI', containerEnv: 'COURIER_SMTP_CONNECTION_URI', key: 'courier.smtp.connection_uri', kind: 'string', meaning: 'smtps://user:password@host:465/ of the mail relay' },
  ],
  hydra: [
    { env: 'HYDRA_DSN', containerEnv: 'DSN', key: 'dsn', kind: 'string', meaning: 'PostgreSQL URL of the Hydra database (its own database, not Kratos\')' },
    { env: 'HYDRA_SECRETS_SYSTEM', containerEnv: 'SECRETS_SYSTEM', key: 'secrets.system', kind: 'list', meaning: 'system secrets, newest first, each ≥ 32 characters' },
    { env: 'HYDRA_SECRETS_COOKIE', containerEnv: 'SECRETS_COOKIE', key: 'secrets.cookie', kind: 'list', meaning: 'cookie secrets, newest first, each ≥ 16 characters' },
  ],
};

/** Non-secret variables the templates use (name, default or undefined when required, meaning); a default `$NAME` means "the value of NAME". */
export const TEMPLATE_VARIABLES: ReadonlyArray<{ name: string; default?: string; meaning: string }> = [
  { name: 'IDENTITY_PARENT_DOMAIN', meaning: 'parent domain of every site, e.g. example.org; the session cookie is set on it' },
  { name: 'IDENTITY_AUTH_URL', meaning: 'public URL of the login/consent app, e.g. https://auth.example.org' },
  { name: 'IDENTITY_ACCOUNTS_URL', default: '$IDENTITY_AUTH_URL', meaning: 'base URL of the self-service pages for registration, recovery, verification, settings and errors (the official Kratos UI container), e.g. https://accounts.example.org' },
  { name: 'IDENTITY_APP_URL', meaning: 'where users land after login or logout without a return URL, e.g. https://app.example.org' },
  { name: 'KRATOS_PUBLIC_URL', meaning: 'public URL of Kratos, e.g. https://auth.example.org/kratos' },
  { name: 'KRATOS_ADMIN_URL', meaning: 'internal admin URL of Kratos, e.g. http://kratos:4434' },
  { name: 'HYDRA_PUBLIC_URL', meaning: 'public URL and issuer of Hydra, e.g. https://oauth.example.org/' },
  { name: 'HYDRA_ADMIN_URL', meaning: 'internal admin URL of Hydra, e.g. http://hydra:4445' },
  { name: 'IDENTITY_SMTP_FROM', meaning: 'sender address of verification and recovery mails' },
  { name: 'IDENTITY_SITE_NAME', default: 'Geodata Platform', meaning: 'name shown in mails, TOTP apps and passkey prompts' },
  { name: 'KRATOS_IDENTITY_SCHEMA_URL', default: 'file:///etc/config/kratos/identity.schema.json', meaning: 'where the Kratos container finds identity.schema.json' },
  { name: 'IDENTITY_DEV_MODE', default: 'false', meaning: 'true only on a developer machine: allows an http issuer (sets dev: true)' },
  { name: 'IDENTITY_PREVIEW_DOMAINS', default: '', meaning: 'comma-separated hosts of the preview sites (team branches); identity:check refuses any under IDENTITY_PARENT_DOMAIN (not used by the templates)' },
  { name: 'IDENTITY_API_AUDIENCE', default: 'geodata-api', meaning: 'the audience the API requires; every client in clients.yaml may request it' },
  { name: 'IDENTITY_OIDC_PROVIDERS', default: '[]', meaning: 'social sign-in providers as a JSON array (id, provider, label, client_id, issuer_url, scope, mapper, microsoft_tenant); their client secrets come from KRATOS_OIDC_CLIENT_SECRETS' },
];

/**
 * Social sign-in (Kratos' `oidc` method). An operator declares each provider without its secret in
 * IDENTITY_OIDC_PROVIDERS and the secrets, by provider id, in KRATOS_OIDC_CLIENT_SECRETS (a JSON object,
 * a secret). Kratos receives the whole list, secrets and claims mappers included, as one secret
 * variable: SELFSERVICE_METHODS_OIDC_CONFIG_PROVIDERS. The mapper is one of identity/config/oidc/*.jsonnet,
 * inlined as a base64:// URL so no extra file has to be mounted.
 */
export const OIDC_SECRETS_VARIABLE = 'KRATOS_OIDC_CLIENT_SECRETS';
export const OIDC_PROVIDERS_VARIABLE = 'IDENTITY_OIDC_PROVIDERS';
export const OIDC_CONTAINER_VARIABLE = 'SELFSERVICE_METHODS_OIDC_CONFIG_PROVIDERS';
export const OIDC_MAPPERS = ['generic', 'github'] as const;

export interface OidcProviderDeclaration {
  /** Kratos' provider id: part of the redirect URI, never to be changed once users signed in with it. */
  id: string;
  /** Kratos' provider type: `generic` (any issuer with discovery: Keycloak, Entra ID v2.0 …), `microsoft`, `github` … */
  provider: string;
  label?: string;
  client_id: string;
  issuer_url?: string;
  scope?: string[];
  microsoft_tenant?: string;
  /** Which mapper of identity/config/oidc/ (default: `github` for GitHub, else `generic`). */
  mapper?: string;
  [other: string]: unknown;
}

function parseJsonVariable(name: string, raw: string | undefined, fallback: unknown): unknown {
  if (raw === undefined || raw.trim() === '') return fallback;
  try {
    return JSON.parse(raw) as unknown;
  } catch {
    // Never echo the value: KRATOS_OIDC_CLIENT_SECRETS holds secrets.
    throw new ConfigError(`${name} must be JSON`);
  }
}

/** The path of a mapper in the config folder (or undefined for a name that is none of ours). */
export function mapperPath(mapper: string, configDir: string): string | undefined {
  return (OIDC_MAPPERS as readonly string[]).includes(mapper) ? join(configDir, 'oidc', `${mapper}.jsonnet`) : undefined;
}

/**
 * The providers as Kratos takes them: each declaration with its client secret (missing: left out, and
 * identity:check names the provider) and its mapper as a base64:// URL. Empty without declarations.
 */
export function oidcProviders(env: Env, configDir: string): Record<string, unknown>[] {
  const declared = parseJsonVariable(OIDC_PROVIDERS_VARIABLE, env[OIDC_PROVIDERS_VARIABLE], []);
  if (!Array.isArray(declared)) throw new ConfigError(`${OIDC_PROVIDERS_VARIABLE} must be a JSON array of providers`);
  const secrets = parseJsonVariable(OIDC_SECRETS_VARIABLE, env[OIDC_SECRETS_VARIABLE], {});
  if (secrets === null || typeof secrets !== 'object' || Array.isArray(secrets)) throw new ConfigError(`${OIDC_SECRETS_VARIABLE} must be a JSON object of client secrets by provider id`);
  return declared.map((entry: unknown, i) => {
    if (entry === null || typeof entry !== 'object' || Array.isArray(entry)) throw new ConfigError(`${OIDC_PROVIDERS_VARIABLE}[${i}] must be an object`);
    const { mapper: mapperName, client_secret: inline, ...provider } = entry as OidcProviderDeclaration;
    if (inline !== undefined) throw new ConfigError(`${OIDC_PROVIDERS_VARIABLE}[${i}] holds a client_secret: put it in ${OIDC_SECRETS_VARIABLE}, which is a secret`);
    const mapper = mapperName ?? (provider.provider === 'github' ? 'github' : 'generic');
    const path = typeof mapper === 'string' ? mapperPath(mapper, configDir) : undefined;
    if (!path) throw new ConfigError(`${OIDC_PROVIDERS_VARIABLE}[${i}].mapper must be one of ${OIDC_MAPPERS.join(', ')}`);
    const secret = typeof provider.id === 'string' ? (secrets as Record<string, unknown>)[provider.id] : undefined;
    return {
      ...provider,
      ...(typeof secret === 'string' ? { client_secret: secret } : {}),
      mapper_url: `base64://${readFileSync(path).toString('base64')}`,
    };
  });
}

const PLACEHOLDER = /\$\{([A-Z][A-Z0-9_]*)(?::-([^}]*))?\}/g;

function substituteString(text: string, env: Env, where: string): string {
  return text.replace(PLACEHOLDER, (_match, name: string, fallback: string | undefined) => {
    const value = env[name];
    if (value !== undefined && value !== '') return value;
    // `${A:-$B}`: A, or else the value of B (itself required).
    if (fallback !== undefined && /^\$[A-Z][A-Z0-9_]*$/.test(fallback)) return substituteString(`\${${fallback.slice(1)}}`, env, where);
    if (fallback !== undefined) return fallback;
    throw new ConfigError(`${where} needs the environment variable ${name}`);
  });
}

/** Replace placeholders in every string of a parsed document (after parsing, so a value can never inject YAML). */
export function substitute(value: unknown, env: Env, where: string): unknown {
  if (typeof value === 'string') return substituteString(value, env, where);
  if (Array.isArray(value)) return value.map((item, i) => substitute(item, env, `${where}[${i}]`));
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(
      Object.entries(value).map(([k, v]) => [k, substitute(v, env, where.endsWith(':') ? `${where} ${k}` : `${where}.${k}`)]),
    );
  }
  return value;
}

export function isDevMode(env: Env): boolean {
  return env.IDENTITY_DEV_MODE === 'true';
}

/** Read a template and substitute the environment: the file the container mounts (no secrets in it). */
export function renderTemplate(service: ServiceName, env: Env, configDir: string): Record<string, unknown> {
  const file = `${service}.yml`;
  const parsed = parseYaml(readFileSync(join(configDir, file), 'utf8')) as unknown;
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) throw new ConfigError(`${file} is not a YAML mapping`);
  const rendered = substitute(parsed, env, `${file}:`) as Record<string, unknown>;
  if (isDevMode(env)) rendered.dev = true;
  return rendered;
}

/** Ory's rule for list variables (configx): a JSON array, otherwise comma-separated. */
export function parseListVariable(raw: string): string[] {
  const trimmed = raw.trim();
  if (trimmed.startsWith('[')) {
    try {
      const parsed = JSON.parse(trimmed) as unknown;
      if (Array.isArray(parsed)) return parsed.map(String);
    } catch {
      // not JSON after all: fall through to the comma rule, as configx does
    }
  }
  return trimmed.split(',').map((item) => item.trim()).filter((item) => item !== '');
}

function setPath(target: Record<string, unknown>, dottedKey: string, value: unknown): void {
  const parts = dottedKey.split('.');
  let node = target;
  for (const part of parts.slice(0, -1)) {
    const next = node[part];
    if (next === null || typeof next !== 'object' || Array.isArray(next)) node[part] = {};
    node = node[part] as Record<string, unknown>;
  }
  node[parts[parts.length - 1] as string] = value;
}

/** The configuration the service will run with: the rendered file plus the secret variables. */
export function effectiveConfig(service: ServiceName, env: Env, configDir: string): Record<string, unknown> {
  const config = structuredClone(renderTemplate(service, env, configDir));
  for (const variable of SECRET_VARIABLES[service]) {
    const raw = env[variable.env];
    if (raw === undefined || raw === '') continue;
    setPath(config, variable.key, variable.kind === 'list' ? parseListVariable(raw) : raw);
  }
  if (service === 'kratos') {
    const providers = oidcProviders(env, configDir);
    if (providers.length > 0) setPath(config, 'selfservice.methods.oidc.config.providers', providers);
  }
  return config;
}

/** The environment a container needs: Ory's variable names with our operators' values (for infra/). */
export function containerEnvironment(service: ServiceName, env: Env, configDir: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const variable of SECRET_VARIABLES[service]) {
    const raw = env[variable.env];
    if (raw !== undefined && raw !== '') out[variable.containerEnv] = raw;
  }
  if (service === 'kratos') {
    // The providers with their client secrets: a secret as a whole (Kratos replaces the file's empty list).
    const providers = oidcProviders(env, configDir);
    if (providers.length > 0) out[OIDC_CONTAINER_VARIABLE] = JSON.stringify(providers);
  }
  return out;
}
