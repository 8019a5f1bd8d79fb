import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { Ajv, ValidateFunction } from 'ajv';
import { ConfigError } from '../../../services/shared/config.js';
import { contractPath } from '../../../services/shared/contracts.js';
import { createAjv } from '../../../services/shared/ajv.js';
import { describeAjvError } from './ajv.js';
import { effectiveConfig, isDevMode, type Env } from '../../../services/shared/identity-config/render.js';
import { CONFIG_DIR } from './config-dir.js';

/**
 * The config check: the rendered Kratos and Hydra configuration (with the secret variables merged in as
 * the services would) against the vendored v26.2.0 JSON schemas, then the runtime rules the schemas
 * cannot express. Every finding names the file and the key an operator has to fix.
 */

export interface Finding {
  file: 'kratos.yml' | 'hydra.yml' | 'identity.schema.json';
  key: string;
  message: string;
}

/**
 * The Ory folder of the pinned upstream contracts (services/shared/contracts.ts says where they are found,
 * and refuses a copy whose files differ from their sha256 pins).
 */
export function oryContractsDir(): string {
  return dirname(dirname(contractPath('ory/kratos-v26.2.0/embedx__config.schema.json')));
}

function readJson(path: string): Record<string, unknown> {
  return JSON.parse(readFileSync(path, 'utf8')) as Record<string, unknown>;
}

function withoutId(schema: Record<string, unknown>): Record<string, unknown> {
  const { $id: _id, ...rest } = schema;
  return rest;
}

interface Validators {
  kratos: ValidateFunction;
  hydra: ValidateFunction;
  identitySchema: ValidateFunction;
}

let cached: Validators | undefined;

/** Compile the vendored schemas once per process, registering the partials as the vendor README says. */
export function loadValidators(): Validators {
  if (cached) return cached;
  const vendorDir = oryContractsDir();
  const kratosDir = join(vendorDir, 'kratos-v26.2.0');
  const hydraDir = join(vendorDir, 'hydra-v26.2.0');

  const kratosAjv: Ajv = createAjv();
  kratosAjv.addSchema(readJson(join(kratosDir, 'oryx__otelx__config.schema.json')));
  kratosAjv.addSchema(readJson(join(kratosDir, 'embedx__identity_extension.schema.json')));
  const kratos = kratosAjv.compile(readJson(join(kratosDir, 'embedx__config.schema.json')));
  const identitySchema = kratosAjv.compile(readJson(join(kratosDir, 'embedx__identity_meta.schema.json')));

  const hydraAjv: Ajv = createAjv();
  const otel = readJson(join(hydraDir, 'oryx__otelx__config.schema.json'));
  hydraAjv.addSchema(otel);
  hydraAjv.addSchema(withoutId(otel), 'https://raw.githubusercontent.com/ory/hydra/011a01ce/oryx/otelx/config.schema.json');
  for (const partial of ['serve', 'cors', 'tls']) {
    hydraAjv.addSchema(withoutId(readJson(join(hydraDir, `oryx__configx__${partial}.schema.json`))), `ory://${partial}-config`);
  }
  const hydra = hydraAjv.compile(readJson(join(hydraDir, 'schema__config.schema.json')));

  cached = { kratos, hydra, identitySchema };
  return cached;
}

function schemaFindings(file: Finding['file'], validate: ValidateFunction, document: unknown): Finding[] {
  if (validate(document)) return [];
  return (validate.errors ?? [])
    .filter((error) => !['if', 'anyOf', 'oneOf', 'allOf'].includes(error.keyword))
    .map((error) => ({ file, ...describeAjvError(error) }));
}

function stringList(value: unknown): string[] | undefined {
  return Array.isArray(value) ? value.map(String) : undefined;
}

function get(config: Record<string, unknown>, dottedKey: string): unknown {
  return dottedKey.split('.').reduce<unknown>((node, part) => (node !== null && typeof node === 'object' ? (node as Record<string, unknown>)[part] : undefined), config);
}

/** Kratos: the cipher secret must be exactly 32 characters (others are silently ignored); a default secret must exist. */
export function kratosRuntimeFindings(config: Record<string, unknown>): Finding[] {
  const findings: Finding[] = [];
  const cipher = stringList(get(config, 'secrets.cipher'));
  if (!cipher || cipher.length === 0) {
    findings.push({ file: 'kratos.yml', key: 'secrets.cipher', message: 'is not set (KRATOS_SECRETS_CIPHER): one secret of exactly 32 characters is needed' });
  } else {
    cipher.forEach((secret, i) => {
      if (secret.length !== 32) {
        findings.push({ file: 'kratos.yml', key: `secrets.cipher[${i}]`, message: `must be exactly 32 characters, has ${secret.length} (Kratos ignores it otherwise)` });
      }
    });
  }
  findings.push(...keyOriginFindings(config));
  findings.push(...oidcFindings(config));
  const defaults = stringList(get(config, 'secrets.default'));
  if (!defaults || defaults.length === 0) {
    findings.push({ file: 'kratos.yml', key: 'secrets.default', message: 'is not set (KRATOS_SECRETS_DEFAULT): every process would invent its own and sessions break across restarts' });
  }
  return findings;
}

/**
 * WebAuthn and passkeys: the browser reports the page's origin, and Kratos refuses a key used on a page
 * whose origin is not in `rp.origins`. Keys are used on the login page (flows.login.ui_url) and
 * registered on the registration and settings pages, so each of those origins must be listed.
 */
function keyOriginFindings(config: Record<string, unknown>): Finding[] {
  const findings: Finding[] = [];
  const pages = ['login', 'registration', 'settings']
    .map((flow) => [flow, get(config, `selfservice.flows.${flow}.ui_url`)] as const)
    .filter((entry): entry is readonly [string, string] => typeof entry[1] === 'string' && URL.canParse(entry[1]));
  for (const method of ['webauthn', 'passkey']) {
    if (get(config, `selfservice.methods.${method}.enabled`) !== true) continue;
    const origins = new Set((stringList(get(config, `selfservice.methods.${method}.config.rp.origins`)) ?? []).filter((o) => URL.canParse(o)).map((o) => new URL(o).origin));
    for (const [flow, uiUrl] of pages) {
      const origin = new URL(uiUrl).origin;
      if (!origins.has(origin)) {
        findings.push({ file: 'kratos.yml', key: `selfservice.methods.${method}.config.rp.origins`, message: `lacks ${origin}, where the ${flow} page runs (a key used there is refused)` });
      }
    }
  }
  return findings;
}

/** A mapper's Jsonnet source from its URL: base64:// inline (as render.ts writes it) or a file:// path. */
function mapperSource(url: string): string | undefined {
  if (url.startsWith('base64://')) return Buffer.from(url.slice('base64://'.length), 'base64').toString('utf8');
  if (url.startsWith('file://')) {
    try {
      return readFileSync(new URL(url), 'utf8');
    } catch {
      return undefined;
    }
  }
  return undefined;
}

/** Jsonnet without its comments (`//`, `#`, `/* … *\/`), so a comment may mention what code must not do. */
export function withoutJsonnetComments(source: string): string {
  return source.replace(/\/\*[\s\S]*?\*\//g, ' ').replace(/(^|[^:'"])(\/\/|#).*$/gm, '$1');
}

/**
 * What a claims mapper must never do: give a role. The role lives in metadata_public, which only the
 * admin API writes; a mapper that sets metadata (or names a role at all) would let whoever controls a
 * provider account, or the provider itself, choose its platform role.
 */
export function mapperProblems(source: string): string[] {
  const code = withoutJsonnetComments(source);
  const problems: string[] = [];
  if (/\bmetadata_(public|admin)\b/.test(code)) problems.push('sets identity metadata (metadata_public/metadata_admin): a provider must never grant a role');
  if (/\brole\b/.test(code)) problems.push('mentions a role: a mapper maps e-mail and name only, roles are granted by an administrator');
  if (!/\bemail\b/.test(code)) problems.push('does not map the e-mail address (traits.email is required)');
  return problems;
}

/**
 * Social sign-in: every provider has a client secret (Kratos' schema asks for the key; an empty value
 * passes it but fails at the provider), a URL-safe unique id (it is part of the redirect URI), an https
 * issuer, and a claims mapper that maps e-mail and name and never a role.
 */
export function oidcFindings(config: Record<string, unknown>): Finding[] {
  const findings: Finding[] = [];
  if (get(config, 'selfservice.methods.oidc.enabled') !== true) return findings;
  const providers = get(config, 'selfservice.methods.oidc.config.providers');
  if (!Array.isArray(providers)) return findings;
  const seen = new Set<string>();
  providers.forEach((entry: unknown, i) => {
    const provider = (entry ?? {}) as Record<string, unknown>;
    const key = `selfservice.methods.oidc.config.providers[${i}]`;
    const id = typeof provider.id === 'string' ? provider.id : '';
    if (!/^[a-z0-9][a-z0-9_-]{0,62}$/.test(id)) findings.push({ file: 'kratos.yml', key: `${key}.id`, message: 'must be lower-case letters, digits, - or _ (it is part of the redirect URI)' });
    if (seen.has(id)) findings.push({ file: 'kratos.yml', key: `${key}.id`, message: `${id} is used by two providers` });
    seen.add(id);
    if (provider.provider !== 'apple' && (typeof provider.client_secret !== 'string' || provider.client_secret.trim() === '')) {
      findings.push({ file: 'kratos.yml', key: `${key}.client_secret`, message: `is not set for provider ${id || i} (KRATOS_OIDC_CLIENT_SECRETS["${id}"])` });
    }
    if (typeof provider.issuer_url === 'string' && !provider.issuer_url.startsWith('https://') && get(config, 'dev') !== true) {
      findings.push({ file: 'kratos.yml', key: `${key}.issuer_url`, message: `must use https outside dev mode, is ${provider.issuer_url}` });
    }
    if (provider.provider === 'generic' && typeof provider.issuer_url !== 'string') {
      findings.push({ file: 'kratos.yml', key: `${key}.issuer_url`, message: 'is needed for a generic provider (Kratos discovers its endpoints from it)' });
    }
    const source = typeof provider.mapper_url === 'string' ? mapperSource(provider.mapper_url) : undefined;
    if (source === undefined) {
      findings.push({ file: 'kratos.yml', key: `${key}.mapper_url`, message: 'cannot be read here (use one of identity/config/oidc/ through IDENTITY_OIDC_PROVIDERS)' });
    } else {
      for (const problem of mapperProblems(source)) findings.push({ file: 'kratos.yml', key: `${key}.mapper_url`, message: `the claims mapper of ${id || i} ${problem}` });
    }
  });
  return findings;
}

/**
 * Preview sites (IDENTITY_PREVIEW_DOMAINS, comma-separated hosts: the branch sites that run code from
 * team pushes) must not receive the session cookie: none may be the cookie domain, under it or above it.
 */
export function previewDomainFindings(env: Env): Finding[] {
  const parent = env.IDENTITY_PARENT_DOMAIN?.toLowerCase();
  if (!parent || !env.IDENTITY_PREVIEW_DOMAINS) return [];
  const within = (host: string, domain: string) => host === domain || host.endsWith(`.${domain}`);
  return env.IDENTITY_PREVIEW_DOMAINS.split(',')
    .map((host) => host.trim().toLowerCase())
    .filter((host) => host !== '' && (within(host, parent) || within(parent, host)))
    .map((host) => ({
      file: 'kratos.yml' as const,
      key: 'session.cookie.domain',
      message: `${parent} covers the preview site ${host}: it would receive every user's session cookie; put preview sites on a registrable domain of their own`,
    }));
}

/** Hydra: the issuer must be https (unless dev mode) and the system secret at least 32 characters. */
export function hydraRuntimeFindings(config: Record<string, unknown>, devMode: boolean): Finding[] {
  const findings: Finding[] = [];
  const issuer = get(config, 'urls.self.issuer');
  if (typeof issuer !== 'string' || issuer === '') {
    findings.push({ file: 'hydra.yml', key: 'urls.self.issuer', message: 'is not set (HYDRA_PUBLIC_URL)' });
  } else if (!devMode && !issuer.startsWith('https://')) {
    findings.push({ file: 'hydra.yml', key: 'urls.self.issuer', message: `must use https outside dev mode, is ${issuer}` });
  }
  const system = stringList(get(config, 'secrets.system'));
  if (!system || system.length === 0) {
    findings.push({ file: 'hydra.yml', key: 'secrets.system', message: 'is not set (HYDRA_SECRETS_SYSTEM)' });
  } else {
    system.forEach((secret, i) => {
      if (secret.length < 32) findings.push({ file: 'hydra.yml', key: `secrets.system[${i}]`, message: `must be at least 32 characters, has ${secret.length}` });
    });
  }
  return findings;
}

export interface CheckOptions {
  configDir?: string;
}

function renderFindings(file: Finding['file'], render: () => Record<string, unknown>): { config?: Record<string, unknown>; findings: Finding[] } {
  try {
    return { config: render(), findings: [] };
  } catch (error) {
    if (error instanceof ConfigError) return { findings: [{ file, key: '(template)', message: error.message }] };
    throw error;
  }
}

/** Render both services with `env`, validate them and the identity schema; an empty list means all good. */
export function checkIdentityConfig(env: Env, options: CheckOptions = {}): Finding[] {
  const configDir = options.configDir ?? CONFIG_DIR;
  const validators = loadValidators();
  const findings: Finding[] = [];

  const kratos = renderFindings('kratos.yml', () => effectiveConfig('kratos', env, configDir));
  findings.push(...kratos.findings);
  if (kratos.config) {
    findings.push(...schemaFindings('kratos.yml', validators.kratos, kratos.config));
    findings.push(...kratosRuntimeFindings(kratos.config));
  }

  const hydra = renderFindings('hydra.yml', () => effectiveConfig('hydra', env, configDir));
  findings.push(...hydra.findings);
  if (hydra.config) {
    findings.push(...schemaFindings('hydra.yml', validators.hydra, hydra.config));
    findings.push(...hydraRuntimeFindings(hydra.config, isDevMode(env)));
  }

  findings.push(...previewDomainFindings(env));
  const identitySchema = readJson(join(configDir, 'identity.schema.json'));
  findings.push(...schemaFindings('identity.schema.json', validators.identitySchema, identitySchema));
  return findings;
}

export function formatFinding(finding: Finding): string {
  return `${finding.file}: ${finding.key} ${finding.message}`;
}
