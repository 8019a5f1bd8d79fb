import { connect, type PeerCertificate } from 'node:tls';
import { createTransport } from 'nodemailer';
import { parse as parseYaml } from 'yaml';
import { ConfigError } from '../../../services/shared/config.js';
import { loadIdentityAppConfig } from '../app/config.js';
import { hydraRuntimeFindings } from '../config/check.js';
import { effectiveConfig, isDevMode, parseListVariable, type Env } from '../../../services/shared/identity-config/render.js';
import type { DeclaredStack } from '../../../services/shared/declared-stack.js';
import { checkAdminInternal, checkBackups, checkGeoServerWriters, checkPreviewSites, checkSecretEnvironments, checkSitesIsolated, readDeclaredStack, type DeclaredResult, type Verdict } from './declared.js';

/**
 * The seed's production checklist as checks that pass or fail, each with the reason. Items about the
 * deployment check the declared stack: the Pulumi program under the runtime mocks with the operator's
 * stack file (./declared.ts), never text in source files; when it cannot be read, those items fail and
 * say why. Network items (TLS, SMTP) only pass after really connecting.
 */

export interface ChecklistItem {
  name: string;
  ok: boolean;
  detail: string;
}

export interface ChecklistOptions {
  env: Env;
  repoRoot: string;
  /** Connect to every auth domain on 443 and verify its certificate. */
  live?: boolean;
  /** Send a test mail through the configured SMTP relay to this address. */
  testMailTo?: string;
  /** Extra trusted CA (tests); production uses the system store. */
  tlsCa?: string;
  /** Port for the TLS probe (tests); 443 otherwise. */
  tlsPort?: number;
  /** Where kratos.yml/hydra.yml live (tests); identity/config otherwise. */
  configDir?: string;
  /** The operator's Pulumi stack file (infra/Pulumi.<stack>.yaml); infra/Pulumi.example.yaml otherwise. */
  stackFile?: string;
  /** The declared stack, when the caller already has it (tests); read from infra/ otherwise. */
  declared?: DeclaredResult;
}

const item = (name: string, ok: boolean, detail: string): ChecklistItem => ({ name, ok, detail });

function systemSecret(env: Env): ChecklistItem {
  const name = 'Hydra system secret ≥ 32 characters';
  const raw = env.HYDRA_SECRETS_SYSTEM;
  if (!raw) return item(name, false, 'HYDRA_SECRETS_SYSTEM is not set');
  const findings = hydraRuntimeFindings({ urls: { self: { issuer: 'https://x/' } }, secrets: { system: parseListVariable(raw) } }, true);
  return findings.length === 0 ? item(name, true, 'every HYDRA_SECRETS_SYSTEM entry has at least 32 characters') : item(name, false, findings.map((f) => `${f.key} ${f.message}`).join('; '));
}

function fromDeclared(name: string, declared: DeclaredResult, check: (stack: DeclaredStack) => Verdict, passed: string): ChecklistItem {
  if (!declared.ok) return item(name, false, `declared stack not readable: ${declared.reason}`);
  const result = check(declared.stack);
  return result.ok ? item(name, true, passed) : item(name, false, result.problems.join('; '));
}

function authHosts(env: Env): string[] {
  return [...new Set(['IDENTITY_AUTH_URL', 'KRATOS_PUBLIC_URL', 'HYDRA_PUBLIC_URL'].map((k) => env[k]).filter((v): v is string => Boolean(v)).map((v) => new URL(v).host))];
}

async function probeCertificate(host: string, port: number, ca?: string): Promise<PeerCertificate> {
  const [hostname] = host.split(':') as [string];
  return new Promise((resolve, reject) => {
    const socket = connect({ host: hostname, port, servername: hostname, rejectUnauthorized: true, timeout: 5000, ...(ca ? { ca } : {}) }, () => {
      const cert = socket.getPeerCertificate();
      socket.end();
      resolve(cert);
    });
    socket.once('timeout', () => socket.destroy(new Error('timed out')));
    socket.once('error', reject);
  });
}

async function tlsCertificates(options: ChecklistOptions): Promise<ChecklistItem> {
  const name = 'TLS certificates for every auth domain';
  const urls = ['IDENTITY_AUTH_URL', 'KRATOS_PUBLIC_URL', 'HYDRA_PUBLIC_URL'].map((k) => [k, options.env[k]] as const);
  const missing = urls.filter(([, v]) => !v).map(([k]) => k);
  if (missing.length > 0) return item(name, false, `${missing.join(', ')} not set`);
  const plain = urls.filter(([, v]) => !(v as string).startsWith('https://')).map(([k]) => k);
  if (plain.length > 0) return item(name, false, `${plain.join(', ')} not https`);
  if (!options.live) return item(name, false, `not verified: run with --live on a host that reaches ${authHosts(options.env).join(', ')}`);
  const problems: string[] = [];
  for (const host of authHosts(options.env)) {
    try {
      const cert = await probeCertificate(host, options.tlsPort ?? 443, options.tlsCa);
      const daysLeft = (Date.parse(cert.valid_to) - Date.now()) / 86_400_000;
      if (daysLeft < 14) problems.push(`${host}: certificate expires in ${Math.floor(daysLeft)} days`);
    } catch (error) {
      problems.push(`${host}: ${(error as Error).message}`);
    }
  }
  return problems.length === 0 ? item(name, true, `valid certificates for ${authHosts(options.env).join(', ')}`) : item(name, false, problems.join('; '));
}

function adminInternal(options: ChecklistOptions, declared: DeclaredResult): ChecklistItem {
  const name = 'admin APIs (Kratos 4434, Hydra 4445) internal only';
  const problems: string[] = [];
  const publicDomain = options.env.IDENTITY_PARENT_DOMAIN;
  for (const key of ['KRATOS_ADMIN_URL', 'HYDRA_ADMIN_URL']) {
    const value = options.env[key];
    if (!value) problems.push(`${key} not set`);
    else if (publicDomain && new URL(value).hostname.endsWith(publicDomain)) problems.push(`${key} points at a public host (${new URL(value).hostname})`);
  }
  if (!declared.ok) return item(name, false, [...problems, `declared stack not readable: ${declared.reason}`].join('; '));
  problems.push(...checkAdminInternal(declared.stack).problems);
  return problems.length === 0 ? item(name, true, 'admin URLs are internal hosts, no admin port is published, the proxy answers 403 to /admin on every site') : item(name, false, problems.join('; '));
}

function loginRateLimits(env: Env): ChecklistItem {
  const name = 'login rate limiting on';
  try {
    const { loginLimit } = loadIdentityAppConfig(env as NodeJS.ProcessEnv);
    const ok = loginLimit.perAccount <= 20 && loginLimit.perIp <= 300;
    const detail = `${loginLimit.perIp} attempts per IP and ${loginLimit.perAccount} failed attempts per account per ${loginLimit.windowMs / 60_000} min on POST /self-service/login`;
    return item(name, ok, ok ? detail : `${detail}: too lax (at most 20 per account and 300 per IP)`);
  } catch (error) {
    return item(name, false, error instanceof ConfigError ? `login app configuration invalid: ${error.message}` : String(error));
  }
}

type CorsConfig = { serve?: Record<string, { cors?: { enabled?: boolean; allowed_origins?: string[] } }> };

function corsProblems(label: string, config: CorsConfig, parent: string): string[] {
  const problems: string[] = [];
  for (const port of ['public', 'admin']) {
    const cors = config.serve?.[port]?.cors;
    if (!cors?.enabled) continue;
    for (const origin of cors.allowed_origins ?? []) {
      const host = origin.replace(/^https:\/\//, '').replace(/^\*\./, '');
      if (!origin.startsWith('https://') || origin === '*' || (host !== parent && !host.endsWith(`.${parent}`))) problems.push(`${label} ${port}: ${origin}`);
    }
    if ((cors.allowed_origins ?? []).length === 0) problems.push(`${label} ${port}: CORS on without an origin list (allows every origin)`);
  }
  return problems;
}

/** The rendered kratos.yml / hydra.yml exactly as the declared containers receive them. */
function declaredConfigs(declared: DeclaredResult): { label: string; config: CorsConfig }[] {
  if (!declared.ok) return [];
  const files = { kratos: '/etc/config/kratos/kratos.yml', hydra: '/etc/config/hydra/hydra.yml' } as const;
  return (Object.entries(files) as [keyof typeof files, string][]).flatMap(([service, file]) => {
    const upload = declared.stack.containers.find((c) => c.name === service)?.uploads.find((u) => u.file === file);
    return upload ? [{ label: `${service} (declared)`, config: parseYaml(upload.content) as CorsConfig }] : [];
  });
}

function corsRestricted(env: Env, declared: DeclaredResult, configDir?: string): ChecklistItem {
  const name = 'CORS restricted to own domains';
  const parent = env.IDENTITY_PARENT_DOMAIN;
  if (!parent) return item(name, false, 'IDENTITY_PARENT_DOMAIN not set');
  const problems: string[] = [];
  try {
    for (const service of ['kratos', 'hydra'] as const) problems.push(...corsProblems(service, effectiveConfig(service, env, configDir) as CorsConfig, parent));
    // The files the stack really mounts, checked against the stack's own cookie domain.
    for (const { label, config } of declaredConfigs(declared)) problems.push(...corsProblems(label, config, declared.ok ? declared.stack.parentDomain : parent));
  } catch (error) {
    return item(name, false, (error as Error).message);
  }
  return problems.length === 0 ? item(name, true, `only https://${parent} and its subdomains`) : item(name, false, `foreign or open origins: ${problems.join(', ')}`);
}

async function smtp(options: ChecklistOptions): Promise<ChecklistItem> {
  const name = 'SMTP reachable and a test mail sent';
  const uri = options.env.KRATOS_SMTP_URI;
  if (!uri) return item(name, false, 'KRATOS_SMTP_URI not set');
  if (!options.testMailTo) return item(name, false, 'not verified: run with --send-test-mail <address>');
  const transport = createTransport(uri);
  try {
    await transport.verify();
    const info = await transport.sendMail({
      from: options.env.IDENTITY_SMTP_FROM ?? 'noreply@localhost',
      to: options.testMailTo,
      subject: 'Production checklist test mail',
      text: 'This mail was sent by npm run identity:prod-check to prove the identity service can send mail.',
    });
    return item(name, true, `accepted by ${new URL(uri).hostname} for ${options.testMailTo} (${String(info.messageId)})`);
  } catch (error) {
    // Only the host: the URI carries the relay's credentials.
    return item(name, false, `${new URL(uri).hostname}: ${(error as Error).message}`);
  } finally {
    transport.close();
  }
}

export async function runChecklist(options: ChecklistOptions): Promise<ChecklistItem[]> {
  const devNote = isDevMode(options.env) ? [item('not in dev mode', false, 'IDENTITY_DEV_MODE=true')] : [];
  const declared = options.declared ?? (await readDeclaredStack(options.repoRoot, options.stackFile));
  return [
    systemSecret(options.env),
    fromDeclared('database passwords outside the stack and compose files', declared, checkSecretEnvironments, 'every container given a password, DSN or secret receives it as a Pulumi secret (encrypted state, masked logs)'),
    await tlsCertificates(options),
    adminInternal(options, declared),
    loginRateLimits(options.env),
    corsRestricted(options.env, declared, options.configDir),
    await smtp(options),
    fromDeclared('database backup job present', declared, checkBackups, 'a backup service dumps the features, kratos and hydra databases with pg_dump'),
    fromDeclared('preview sites outside the session cookie domain', declared, checkPreviewSites, 'every preview site lives on a registrable domain of its own and is no CORS origin'),
    fromDeclared('branch sites isolated from databases, GeoServer and Ory', declared, checkSitesIsolated, 'each target\'s site runs in a container of its own, on networks it shares with the proxy alone, outside the internal ranges'),
    fromDeclared('GeoServer writes tied to platform users', declared, checkGeoServerWriters, 'the proxy strips client identity headers, asks the API (forward_auth) and copies its answer; only the proxy reaches GeoServer'),
    ...devNote,
  ];
}
