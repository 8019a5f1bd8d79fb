import { connect, type PeerCertificate } from 'node:tls';
import { createTransport } from 'nodemailer';
import { parse as parseYaml } from 'yaml';
import { IdentityAppEnvSchema } from '../app/config.js';
import type { DeclaredContainer, DeclaredStack } from '../../../services/shared/declared-stack.js';
import {
  caddySites,
  checkAdminInternal,
  checkAdminUrls,
  checkBackups,
  checkContainerLimits,
  checkGeoServerWriters,
  checkHydraSystemSecret,
  checkOidcSecrets,
  checkPreviewSites,
  checkSecretEnvironments,
  checkSitesIsolated,
  checkStackFileSecrets,
  declaresOidcProviders,
  readDeclaredStack,
  type DeclaredResult,
  type Verdict,
} from './declared.js';

/**
 * The seed's production checklist as checks that pass or fail, each with the reason. Every item reads
 * the declared stack only: the Pulumi program under the runtime mocks with the operator's stack file
 * (./declared.ts), never the shell environment of whoever runs the check, nor text in source files;
 * when the stack cannot be read, every item fails and says why. The network items (TLS, SMTP) check
 * what is declared and, when asked (--live, --send-test-mail), really connect.
 */

export interface ChecklistItem {
  name: string;
  ok: boolean;
  detail: string;
}

export interface ChecklistOptions {
  repoRoot: string;
  /** Connect to every auth domain on 443 and verify its certificate. */
  live?: boolean;
  /** Send a test mail through the declared SMTP relay to this address. */
  testMailTo?: string;
  /**
   * The relay's URI for the test mail: smtpConnectionUri, which the stack file holds encrypted (the CLI
   * reads it with `pulumi config get`; the check never decrypts anything itself).
   */
  smtpUri?: string;
  /** Extra trusted CA (tests); production uses the system store. */
  tlsCa?: string;
  /** Port for the TLS probe (tests); 443 otherwise. */
  tlsPort?: number;
  /** The operator's Pulumi stack file (infra/Pulumi.<stack>.yaml); infra/Pulumi.example.yaml otherwise. */
  stackFile?: string;
  /** The declared stack, when the caller already has it (tests); read from infra/ otherwise. */
  declared?: DeclaredResult;
}

const item = (name: string, ok: boolean, detail: string): ChecklistItem => ({ name, ok, detail });

function fromDeclared(name: string, declared: DeclaredResult, check: (stack: DeclaredStack) => Verdict, passed: string | ((stack: DeclaredStack) => string)): ChecklistItem {
  if (!declared.ok) return item(name, false, `declared stack not readable: ${declared.reason}`);
  const result = check(declared.stack);
  return result.ok ? item(name, true, typeof passed === 'string' ? passed : passed(declared.stack)) : item(name, false, result.problems.join('; '));
}

const both =
  (...checks: ((stack: DeclaredStack) => Verdict)[]) =>
  (stack: DeclaredStack): Verdict => {
    const problems = checks.flatMap((check) => check(stack).problems);
    return { ok: problems.length === 0, problems };
  };

const container = (stack: DeclaredStack, name: string): DeclaredContainer | undefined => stack.containers.find((c) => c.name === name);

/** A declared config file (kratos.yml, hydra.yml) exactly as its container receives it. */
function declaredFile(stack: DeclaredStack, service: 'kratos' | 'hydra'): Record<string, unknown> | undefined {
  const upload = container(stack, service)?.uploads.find((u) => u.file === `/etc/config/${service}/${service}.yml`);
  return upload ? (parseYaml(upload.content) as Record<string, unknown>) : undefined;
}

function path(value: unknown, ...keys: string[]): unknown {
  return keys.reduce<unknown>((at, key) => (at !== null && typeof at === 'object' ? (at as Record<string, unknown>)[key] : undefined), value);
}

/** The public URLs of identity: the login app, Kratos' public API, Hydra's issuer, the accounts UI. */
function authUrls(stack: DeclaredStack): [string, string][] {
  const login = container(stack, 'login')?.env ?? {};
  const issuer = path(declaredFile(stack, 'hydra'), 'urls', 'self', 'issuer');
  const urls: [string, string | undefined][] = [
    ['login IDENTITY_AUTH_URL', login.IDENTITY_AUTH_URL],
    ['login KRATOS_PUBLIC_URL', login.KRATOS_PUBLIC_URL],
    ['hydra.yml urls.self.issuer', typeof issuer === 'string' ? issuer : undefined],
    ['login IDENTITY_ACCOUNTS_URL', login.IDENTITY_ACCOUNTS_URL],
  ];
  return urls.filter((u): u is [string, string] => u[1] !== undefined);
}

function authHosts(stack: DeclaredStack): string[] {
  return [...new Set(authUrls(stack).flatMap(([, url]) => (URL.canParse(url) ? [new URL(url).hostname] : [])))];
}

/**
 * Every auth domain is https and a site of the proxy with an automatic (ACME) certificate: no plain
 * http:// site, no `tls internal`, neither `local_certs` nor `auto_https off` in the global options.
 */
function declaredTlsProblems(stack: DeclaredStack): string[] {
  const problems: string[] = [];
  const login = container(stack, 'login');
  if (!login) problems.push('no login container declared');
  const urls = authUrls(stack);
  if (!urls.some(([key]) => key.startsWith('hydra.yml'))) problems.push('hydra.yml declares no issuer');
  for (const [key, url] of urls) if (!url.startsWith('https://')) problems.push(`${key} is not https (${url})`);
  const globalOptions = /^\{\n([\s\S]*?)\n\}$/m.exec(stack.caddyfile)?.[1] ?? '';
  if (/^\s*local_certs\b/m.test(globalOptions)) problems.push('the proxy issues every certificate from its own CA (local_certs)');
  if (/^\s*auto_https\s+(off|disable_certs)\b/m.test(globalOptions)) problems.push('the proxy obtains no certificates (auto_https off)');
  const sites = caddySites(stack.caddyfile);
  for (const host of authHosts(stack)) {
    const site = sites.find((s) => s.address.split(',').map((a) => a.trim().replace(/^https:\/\//, '')).includes(host));
    if (!site) problems.push(`the proxy has no https site for ${host}`);
    else if (site.body.some((l) => /^tls\s+internal\b/.test(l))) problems.push(`${host} gets a certificate from the proxy's own CA (tls internal)`);
  }
  return problems;
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

async function tlsCertificates(options: ChecklistOptions, declared: DeclaredResult): Promise<ChecklistItem> {
  const name = 'TLS certificates for every auth domain';
  if (!declared.ok) return item(name, false, `declared stack not readable: ${declared.reason}`);
  const problems = declaredTlsProblems(declared.stack);
  if (problems.length > 0) return item(name, false, problems.join('; '));
  const hosts = authHosts(declared.stack);
  if (!options.live) return item(name, true, `${hosts.join(', ')}: https sites of the proxy with automatic (ACME) certificates; not probed: --live connects to each`);
  for (const host of hosts) {
    try {
      const cert = await probeCertificate(host, options.tlsPort ?? 443, options.tlsCa);
      const daysLeft = (Date.parse(cert.valid_to) - Date.now()) / 86_400_000;
      if (daysLeft < 14) problems.push(`${host}: certificate expires in ${Math.floor(daysLeft)} days`);
    } catch (error) {
      problems.push(`${host}: ${(error as Error).message}`);
    }
  }
  return problems.length === 0 ? item(name, true, `valid certificates for ${hosts.join(', ')}`) : item(name, false, problems.join('; '));
}

/** Per-IP and per-account limits of the login app, from the login container's declared environment. */
export function checkLoginRateLimits(stack: DeclaredStack): Verdict & { limits?: string } {
  const login = container(stack, 'login');
  if (!login) return { ok: false, problems: ['no login container declared'] };
  const parsed = IdentityAppEnvSchema.safeParse(login.env);
  if (!parsed.success) return { ok: false, problems: [`the login container's environment is invalid: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`] };
  const e = parsed.data;
  const problems: string[] = [];
  if (e.IDENTITY_LOGIN_LIMIT_PER_ACCOUNT > 20) problems.push(`IDENTITY_LOGIN_LIMIT_PER_ACCOUNT=${e.IDENTITY_LOGIN_LIMIT_PER_ACCOUNT} is too lax (at most 20 failed attempts per account)`);
  if (e.IDENTITY_LOGIN_LIMIT_PER_IP > 300) problems.push(`IDENTITY_LOGIN_LIMIT_PER_IP=${e.IDENTITY_LOGIN_LIMIT_PER_IP} is too lax (at most 300 attempts per IP)`);
  if (e.IDENTITY_LOGIN_LIMIT_WINDOW_SECONDS < 60) problems.push(`IDENTITY_LOGIN_LIMIT_WINDOW_SECONDS=${e.IDENTITY_LOGIN_LIMIT_WINDOW_SECONDS} is too short (at least 60)`);
  // Trusting every hop would let a client pick its own address in X-Forwarded-For, and its own bucket.
  if (/^(true|\*)$/i.test(e.IDENTITY_TRUST_PROXY.trim())) problems.push(`IDENTITY_TRUST_PROXY=${e.IDENTITY_TRUST_PROXY} trusts any X-Forwarded-For: a client chooses its own per-IP bucket`);
  problems.push(...kratosGateProblems(stack, login));
  return {
    ok: problems.length === 0,
    problems,
    // (More than one replica without LOGIN_DATABASE_URL fails the schema above, naming the variable.)
    limits: `${e.IDENTITY_LOGIN_LIMIT_PER_IP} attempts per IP and ${e.IDENTITY_LOGIN_LIMIT_PER_ACCOUNT} failed attempts per account per ${e.IDENTITY_LOGIN_LIMIT_WINDOW_SECONDS / 60} min, ${e.LOGIN_DATABASE_URL ? 'counted in PostgreSQL (LOGIN_DATABASE_URL), one budget for every replica' : 'counted in the process (one replica)'}; the proxy sends every POST under /self-service/ on Kratos' public domain through the login app`,
  };
}

/** The names a container is reached by on the stack's networks. */
const namesOf = (c: DeclaredContainer): string[] => [c.name, c.dockerName, ...c.networks.flatMap((n) => n.aliases)];

/**
 * Kratos' public API takes passwords and codes too (browser and API flows of login, registration,
 * recovery, verification, settings): every proxy site that reaches it must send the POSTs under
 * /self-service/ through the login app, where the limiters are (a named matcher on POST and
 * /self-service/*, routed to the login container), or send it everything.
 */
function kratosGateProblems(stack: DeclaredStack, login: DeclaredContainer): string[] {
  const kratos = container(stack, 'kratos');
  if (!kratos) return ['no kratos container declared'];
  const kratosNames = new Set(namesOf(kratos));
  const loginNames = new Set(namesOf(login));
  const upstreamOf = (line: string): string | undefined => /^reverse_proxy\s+(?:@\S+\s+)?([^\s:]+):\d+$/.exec(line)?.[1];
  const problems: string[] = [];
  for (const site of caddySites(stack.caddyfile)) {
    if (!site.body.some((l) => kratosNames.has(upstreamOf(l) ?? ''))) continue;
    const gated = site.body.some((line, i) => {
      const matcher = /^(@\S+) \{$/.exec(line)?.[1];
      if (!matcher) return false;
      const conditions = site.body.slice(i + 1, site.body.indexOf('}', i));
      const post = conditions.some((l) => /^method\s/.test(l) && l.split(/\s+/).includes('POST'));
      const selfService = conditions.some((l) => /^path\s/.test(l) && l.split(/\s+/).some((p) => ['/self-service/*', '/self-service*', '/*', '*'].includes(p)));
      const extra = conditions.filter((l) => !/^(method|path)\s/.test(l));
      if (!post || !selfService || extra.length > 0) return false;
      const route = site.body.indexOf(`route ${matcher} {`);
      if (route < 0) return false;
      const body = site.body.slice(route + 1, site.body.indexOf('}', route));
      return body.some((l) => loginNames.has(upstreamOf(l) ?? ''));
    });
    if (!gated) problems.push(`${site.address} passes Kratos' self-service submissions (POST /self-service/*) to Kratos without the login app's limiters`);
  }
  return problems;
}

type CorsConfig = { serve?: Record<string, { cors?: { enabled?: boolean; allowed_origins?: string[] } }> };

function originProblem(origin: string, parent: string): boolean {
  const host = origin.replace(/^https:\/\//, '').replace(/^\*\./, '');
  return !origin.startsWith('https://') || origin === '*' || (host !== parent && !host.endsWith(`.${parent}`));
}

/** The CORS origins of Kratos and Hydra (their declared files) and of the API and GeoServer (their environment): https, within the cookie domain. */
export function checkCors(stack: DeclaredStack): Verdict {
  const problems: string[] = [];
  const parent = stack.parentDomain;
  for (const service of ['kratos', 'hydra'] as const) {
    const config = declaredFile(stack, service) as CorsConfig | undefined;
    if (!config) {
      problems.push(`${service}: no declared ${service}.yml`);
      continue;
    }
    for (const port of ['public', 'admin']) {
      const cors = config.serve?.[port]?.cors;
      if (!cors?.enabled) continue;
      for (const origin of cors.allowed_origins ?? []) if (originProblem(origin, parent)) problems.push(`${service} ${port}: ${origin}`);
      if ((cors.allowed_origins ?? []).length === 0) problems.push(`${service} ${port}: CORS on without an origin list (allows every origin)`);
    }
  }
  for (const [name, key] of [['api', 'CORS_ORIGINS'], ['geoserver', 'CORS_ALLOWED_ORIGINS']] as const) {
    const value = container(stack, name)?.env[key];
    for (const origin of (value ?? '').split(',').map((o) => o.trim()).filter(Boolean)) if (originProblem(origin, parent)) problems.push(`${name} ${key}: ${origin}`);
  }
  return { ok: problems.length === 0, problems: problems.length === 0 ? [] : [`foreign or open origins: ${problems.join(', ')}`] };
}

/** Kratos' courier: the relay's URI as a Pulumi secret, never in plain text in the stack file; a sender address. */
export function checkSmtpDeclared(stack: DeclaredStack): Verdict {
  const kratos = container(stack, 'kratos');
  if (!kratos) return { ok: false, problems: ['no kratos container declared'] };
  const problems: string[] = [];
  if (!kratos.env.COURIER_SMTP_CONNECTION_URI) problems.push('kratos receives no COURIER_SMTP_CONNECTION_URI: no mail leaves');
  else if (!kratos.envIsSecret) problems.push('kratos receives COURIER_SMTP_CONNECTION_URI (with the relay\'s password) outside a Pulumi secret');
  if (stack.secrets?.some((s) => s.name === 'smtpConnectionUri' && s.source === 'plain text in the stack file')) problems.push('smtpConnectionUri is in plain text in the stack file (pulumi config set --secret smtpConnectionUri …)');
  if (typeof path(declaredFile(stack, 'kratos'), 'courier', 'smtp', 'from_address') !== 'string') problems.push('kratos.yml declares no courier.smtp.from_address');
  return { ok: problems.length === 0, problems };
}

async function smtp(options: ChecklistOptions, declared: DeclaredResult): Promise<ChecklistItem> {
  const name = 'SMTP relay declared, and a test mail sent when asked';
  if (!declared.ok) return item(name, false, `declared stack not readable: ${declared.reason}`);
  const verdict = checkSmtpDeclared(declared.stack);
  if (!verdict.ok) return item(name, false, verdict.problems.join('; '));
  const from = String(path(declaredFile(declared.stack, 'kratos'), 'courier', 'smtp', 'from_address'));
  if (!options.testMailTo) return item(name, true, `Kratos sends as ${from} through smtpConnectionUri, a Pulumi secret; not sent: --send-test-mail <address> sends one`);
  const uri = options.smtpUri;
  if (!uri) return item(name, false, 'no test mail sent: smtpConnectionUri could not be read from the stack (pulumi config get smtpConnectionUri)');
  const transport = createTransport(uri);
  try {
    await transport.verify();
    const info = await transport.sendMail({
      from,
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

/** Kratos or Hydra in dev mode (`dev: true` in the declared file, `--dev`), or the login app told so. */
function devModeProblems(stack: DeclaredStack): string[] {
  const problems: string[] = [];
  for (const service of ['kratos', 'hydra'] as const) {
    if (path(declaredFile(stack, service), 'dev') === true) problems.push(`${service}.yml sets dev: true`);
    if (container(stack, service)?.command.includes('--dev')) problems.push(`${service} runs with --dev`);
  }
  if (container(stack, 'login')?.env.IDENTITY_DEV_MODE === 'true') problems.push('login has IDENTITY_DEV_MODE=true');
  return problems;
}

export async function runChecklist(options: ChecklistOptions): Promise<ChecklistItem[]> {
  const declared = options.declared ?? (await readDeclaredStack(options.repoRoot, options.stackFile));
  const dev = declared.ok ? devModeProblems(declared.stack) : [];
  const login = declared.ok ? checkLoginRateLimits(declared.stack) : undefined;
  return [
    fromDeclared('Hydra system secret ≥ 32 characters', declared, checkHydraSystemSecret, (stack) => {
      const source = stack.secrets?.find((s) => s.name === 'hydraSystemSecret');
      return source?.source === 'generated' ? `generated by the program with ${source.length} characters, a Pulumi secret` : 'set encrypted in the stack file; pulumi preview refuses one under 32 characters';
    }),
    fromDeclared(
      'database passwords outside the stack and compose files',
      declared,
      both(checkSecretEnvironments, checkStackFileSecrets),
      'every container given a password, DSN or secret receives it as a Pulumi secret (encrypted state, masked logs); no secret in plain text in the stack file',
    ),
    await tlsCertificates(options, declared),
    fromDeclared('admin APIs (Kratos 4434, Hydra 4445) internal only', declared, both(checkAdminInternal, checkAdminUrls), 'admin URLs name Kratos and Hydra on an internal network, no admin port is published, the proxy answers 403 to /admin on every site'),
    fromDeclared('login rate limiting on', declared, checkLoginRateLimits, () => login?.limits ?? ''),
    fromDeclared('every container within memory, CPU and process limits', declared, checkContainerLimits, (stack) => `${stack.containers.length} containers, each with at most 16384 MiB without swap, 8 CPUs and 4096 processes`),
    fromDeclared('CORS restricted to own domains', declared, checkCors, (stack) => `only https://${stack.parentDomain} and its subdomains`),
    await smtp(options, declared),
    fromDeclared('database backup job present', declared, checkBackups, 'a backup service dumps the features, kratos and hydra databases with pg_dump'),
    fromDeclared('preview sites outside the session cookie domain', declared, checkPreviewSites, 'every preview site lives on a registrable domain of its own and is no CORS origin'),
    fromDeclared('branch sites isolated from databases, GeoServer and Ory', declared, checkSitesIsolated, 'each target\'s site runs in a container of its own, on networks it shares with the proxy alone, outside the internal ranges'),
    fromDeclared('GeoServer writes tied to platform users', declared, checkGeoServerWriters, 'the proxy strips client identity headers, asks the API (forward_auth) and copies its answer; only the proxy reaches GeoServer'),
    ...(declared.ok && declaresOidcProviders(declared.stack)
      ? [fromDeclared('social sign-in providers have client secrets', declared, checkOidcSecrets, 'every provider Kratos receives has its client secret, inside a Pulumi secret')]
      : []),
    ...(dev.length > 0 ? [item('not in dev mode', false, dev.join('; '))] : []),
  ];
}
