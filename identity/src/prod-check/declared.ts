import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { DeclaredStackSchema, type DeclaredContainer, type DeclaredStack } from '../../../services/shared/declared-stack.js';

/**
 * The deployment items of the production checklist read the declared stack: the Pulumi program run
 * under the runtime mocks (infra/describe-cli.ts, a separate process: identity/ does not import infra/),
 * with the operator's stack file. Each check below takes that data and says what is wrong, by name.
 */

export type DeclaredResult = { ok: true; stack: DeclaredStack } | { ok: false; reason: string };

const run = promisify(execFile);

export async function readDeclaredStack(repoRoot: string, stackFile?: string): Promise<DeclaredResult> {
  const cli = join(repoRoot, 'infra', 'describe-cli.ts');
  if (!existsSync(cli)) return { ok: false, reason: 'infra/ does not exist yet (no infra/describe-cli.ts): nothing declared to verify' };
  try {
    const { stdout } = await run(process.execPath, ['--import', 'tsx', cli, ...(stackFile ? ['--stack-file', stackFile] : [])], { cwd: repoRoot, maxBuffer: 64 * 1024 * 1024 });
    return { ok: true, stack: DeclaredStackSchema.parse(JSON.parse(stdout)) };
  } catch (error) {
    const stderr = (error as { stderr?: string }).stderr?.trim();
    return { ok: false, reason: stderr || (error as Error).message };
  }
}

export interface Verdict {
  ok: boolean;
  problems: string[];
}

const verdict = (problems: string[]): Verdict => ({ ok: problems.length === 0, problems });
const ADMIN_PORTS = [4434, 4445];

/** No admin port published or proxied; Ory admin APIs bound to an internal network; every site answers 403 to /admin* from outside. */
export function checkAdminInternal(stack: DeclaredStack): Verdict {
  const problems: string[] = [];
  for (const c of stack.containers) {
    for (const port of c.ports) {
      if (port.external === undefined) continue;
      if (ADMIN_PORTS.includes(port.internal) || ADMIN_PORTS.includes(port.external)) problems.push(`${c.name} publishes admin port ${port.internal} on the host (as ${port.external})`);
      else if (c.name !== 'proxy') problems.push(`${c.name} publishes port ${port.internal} on the host (only the proxy may)`);
    }
  }
  const internal = new Set(stack.networks.filter((n) => n.internal).map((n) => n.name));
  for (const name of ['kratos', 'hydra']) {
    const c = stack.containers.find((x) => x.name === name);
    if (!c) continue;
    const bound = c.env.SERVE_ADMIN_HOST;
    const attachment = c.networks.find((n) => n.ipv4Address !== undefined && n.ipv4Address === bound);
    if (!attachment || !internal.has(attachment.name)) problems.push(`${name}'s admin API is not bound to its address on an internal network (SERVE_ADMIN_HOST=${bound ?? 'unset'})`);
  }
  if (/reverse_proxy\s+\S+:(4434|4445)\b/.test(stack.caddyfile)) problems.push('the proxy routes to an admin port');
  for (const site of caddySites(stack.caddyfile)) {
    if (!guardsAdmin(site.body)) problems.push(`the proxy does not answer 403 to /admin from outside the internal ranges on ${site.address}`);
  }
  return verdict(problems);
}

interface CaddySite {
  address: string;
  body: string[];
}

/** The site blocks of a rendered Caddyfile (top-level `<address> {` … `}`), without the global options block. */
export function caddySites(caddyfile: string): CaddySite[] {
  const sites: CaddySite[] = [];
  let current: CaddySite | undefined;
  let inGlobal = false;
  for (const line of caddyfile.split('\n')) {
    if (current === undefined && !inGlobal) {
      if (line === '{') inGlobal = true;
      const open = /^(\S+) \{$/.exec(line);
      if (open?.[1]) current = { address: open[1], body: [] };
      continue;
    }
    if (line === '}') {
      if (current) sites.push(current);
      current = undefined;
      inGlobal = false;
      continue;
    }
    current?.body.push(line.trim());
  }
  return sites;
}

/** A named matcher on /admin* that excludes the internal ranges, answered with 403. */
function guardsAdmin(body: string[]): boolean {
  for (let i = 0; i < body.length; i++) {
    const matcher = /^(@\S+) \{$/.exec(body[i] ?? '')?.[1];
    if (!matcher) continue;
    const end = body.indexOf('}', i);
    const lines = body.slice(i + 1, end);
    const onAdmin = lines.some((l) => /^path\s/.test(l) && l.split(/\s+/).includes('/admin*'));
    const outside = lines.some((l) => /^not remote_ip\s+\S/.test(l));
    const answered = body.some((l) => new RegExp(`^respond ${matcher}\\s.*\\b403$`).test(l));
    if (onAdmin && outside && answered) return true;
  }
  return false;
}

/** A running backup service that dumps the features, Kratos and Hydra databases with pg_dump. */
export function checkBackups(stack: DeclaredStack): Verdict {
  const backups = stack.containers.filter((c) => c.kind === 'service' && c.uploads.some((u) => /pg_dump/.test(u.content) && c.entrypoints.concat(c.command).includes(u.file)));
  if (backups.length === 0) return verdict(['no service runs a pg_dump backup script']);
  const dumped = new Set(backups.flatMap((c) => (c.env.BACKUP_DATABASES ?? '').split(/\s+/).map((entry) => entry.split('=')[0])));
  const missing = ['features', 'kratos', 'hydra'].filter((db) => !dumped.has(db));
  return verdict(missing.map((db) => `the ${db} database is not in any backup (BACKUP_DATABASES of ${backups.map((b) => b.name).join(', ')})`));
}

const CREDENTIAL_VARIABLE = /PASSWORD|SECRET|DSN|TOKEN|DATABASE_URL|SMTP/;

/** Every container given a password, DSN or secret gets its environment as a Pulumi secret (never plain in state or logs). */
export function checkSecretEnvironments(stack: DeclaredStack): Verdict {
  return verdict(
    stack.containers
      .filter((c) => !c.envIsSecret && Object.keys(c.env).some((name) => CREDENTIAL_VARIABLE.test(name)))
      .map((c) => `${c.name} receives ${Object.keys(c.env).filter((n) => CREDENTIAL_VARIABLE.test(n)).join(', ')} outside a Pulumi secret`),
  );
}

function within(host: string, domain: string): boolean {
  const h = host.toLowerCase();
  const d = domain.toLowerCase();
  return h === d || h.endsWith(`.${d}`);
}

/** Preview sites (team branches) outside the session cookie domain, and never a CORS origin with credentials. */
export function checkPreviewSites(stack: DeclaredStack): Verdict {
  const problems: string[] = [];
  const previews = stack.targets.filter((t) => t.preview);
  for (const t of previews) {
    if (within(t.domain, stack.parentDomain) || within(stack.parentDomain, t.domain)) problems.push(`preview site ${t.key} (${t.domain}) lies within the session cookie domain ${stack.parentDomain}`);
  }
  for (const c of stack.containers) {
    const origins = [c.env.CORS_ORIGINS, c.env.CORS_ALLOWED_ORIGINS].filter((v): v is string => Boolean(v)).flatMap((v) => v.split(','));
    for (const t of previews) if (origins.includes(`https://${t.domain}`)) problems.push(`${c.name} allows the preview site ${t.domain} as a CORS origin`);
  }
  return verdict(problems);
}

/** The containers that hold a database, Ory or GeoServer (by their Pulumi names). */
const GUARDED_CONTAINERS = ['features-db', 'identity-db', 'kratos', 'hydra', 'geoserver'];

/**
 * Networks a branch site must never join, each with what makes it one: the networks of a database,
 * Ory or GeoServer, and the admin network (where Kratos and Hydra bind their admin APIs).
 */
function guardedNetworks(stack: DeclaredStack): Map<string, string[]> {
  const guarded = new Map<string, string[]>();
  const mark = (network: string, why: string) => guarded.set(network, [...(guarded.get(network) ?? []), why]);
  for (const c of stack.containers.filter((x) => GUARDED_CONTAINERS.includes(x.name))) for (const n of c.networks) mark(n.name, c.name);
  for (const name of ['kratos', 'hydra']) {
    const c = stack.containers.find((x) => x.name === name);
    const admin = c?.networks.find((n) => n.ipv4Address !== undefined && n.ipv4Address === c.env.SERVE_ADMIN_HOST);
    if (admin && !guarded.get(admin.name)?.includes('the admin network')) mark(admin.name, 'the admin network');
  }
  return guarded;
}

/**
 * Every deploy target's branch site runs in a container of its own (`site-<deploy path>`), the one the
 * proxy routes the target's domain to; each site container joins only networks it shares with the
 * proxy alone (not another site, not the webhook, never a network holding a database, Ory or GeoServer,
 * nor the admin network), each with a declared subnet outside the internal ranges (so the proxy answers
 * its code 403 on every guarded path; an undeclared subnet is whatever Docker picks, 192.168.0.0/16
 * included); no container shares a site's network namespace, a site shares none, and no two sites
 * share a volume.
 */
export function checkSitesIsolated(stack: DeclaredStack): Verdict {
  const problems: string[] = [];
  const sites = stack.containers.filter((c) => c.name.startsWith('site-'));
  const proxy = stack.containers.find((c) => c.name === 'proxy');
  const members = (network: string): DeclaredContainer[] => stack.containers.filter((c) => c.networks.some((n) => n.name === network));
  const guarded = guardedNetworks(stack);
  const cidrs = stack.internalCidrs;

  // One site container per target: the one the proxy routes the target's domain to.
  const routes = new Map(caddySites(stack.caddyfile).map((s) => [s.address, s.body.map((l) => /^reverse_proxy\s+([^\s:]+):\d+$/.exec(l)?.[1]).find(Boolean)]));
  const targetsOf = new Map<string, string[]>();
  for (const target of stack.targets) {
    const upstream = routes.get(target.domain);
    if (upstream === undefined) {
      problems.push(`the proxy does not route ${target.domain} (target ${target.key}) to a site`);
      continue;
    }
    const site = sites.find((c) => c.name === upstream || c.dockerName === upstream || c.networks.some((n) => n.aliases.includes(upstream)));
    if (!site) {
      problems.push(`target ${target.key} (${target.domain}) is served by ${upstream}, not by a site container of its own (site-<deploy path>)`);
      continue;
    }
    targetsOf.set(site.name, [...(targetsOf.get(site.name) ?? []), target.key]);
    if (!proxy || !site.networks.some((n) => proxy.networks.some((p) => p.name === n.name))) problems.push(`${site.name} (target ${target.key}) shares no network with the proxy: nothing reaches it`);
  }
  for (const [site, keys] of targetsOf) if (keys.length > 1) problems.push(`targets ${keys.join(', ')} run in one site container, ${site}`);

  for (const site of sites) {
    if (site.networks.length === 0) problems.push(`${site.name} joins no network of its own`);
    for (const attachment of site.networks) {
      const others = members(attachment.name).filter((c) => c.name !== site.name && c.name !== 'proxy');
      const holds = guarded.get(attachment.name);
      if (others.length > 0 || holds) {
        const what = holds ? `: ${attachment.name} holds ${holds.join(', ')}` : '';
        problems.push(`${site.name} shares ${attachment.name} with ${others.map((c) => c.name).join(', ') || 'the proxy'}${what}`);
        continue;
      }
      const subnet = stack.networks.find((n) => n.name === attachment.name)?.subnet;
      if (!subnet) problems.push(`${site.name}'s network ${attachment.name} has no declared subnet: Docker may pick one inside the internal ranges`);
      else if (cidrs.some((range) => overlaps(subnet, range))) problems.push(`${attachment.name} (${subnet}) lies inside the internal ranges: ${site.name}'s code could reach the guarded paths`);
    }
    if (site.networkMode?.startsWith('container:')) problems.push(`${site.name} runs in the network namespace of ${site.networkMode.slice('container:'.length)}`);
    const guests = stack.containers.filter((c) => c.networkMode === `container:${site.dockerName}`);
    if (guests.length > 0) problems.push(`${guests.map((c) => c.name).join(', ')} run in ${site.name}'s network namespace`);
    for (const volume of site.volumes) {
      const later = sites.slice(sites.indexOf(site) + 1).filter((c) => c.volumes.some((v) => v.volumeName === volume.volumeName));
      if (later.length > 0) problems.push(`${site.name} shares volume ${volume.volumeName} with ${later.map((c) => c.name).join(', ')}`);
    }
  }
  return verdict(problems);
}

function ipv4(ip: string): number {
  return ip.split('.').reduce((acc, octet) => acc * 256 + Number(octet), 0);
}

function overlaps(a: string, b: string): boolean {
  const range = (cidr: string): [number, number] | undefined => {
    const [base, bits] = cidr.split('/');
    if (!base || !bits || base.includes(':')) return undefined;
    const size = 2 ** (32 - Number(bits));
    const start = Math.floor(ipv4(base) / size) * size;
    return [start, start + size - 1];
  };
  const ra = range(a);
  const rb = range(b);
  return ra !== undefined && rb !== undefined && ra[0] <= rb[1] && rb[0] <= ra[1];
}

const IDENTITY_HEADERS = ['X-Geodata-User', 'X-Geodata-Role'];

/**
 * GeoServer writes tied to platform users (docs/infra.md, "WFS-T writes and who made them"): the
 * proxy's GeoServer site removes client-sent identity headers, then asks the API with forward_auth and
 * copies its answer; GeoServer shares its networks only with the proxy, its database and the
 * provisioning job (nothing else could send it the headers); the provisioning job writes the header
 * authentication into GeoServer's data directory.
 */
export function checkGeoServerWriters(stack: DeclaredStack): Verdict {
  const geoserver = stack.containers.find((c) => c.name === 'geoserver');
  if (!geoserver) return verdict(['no geoserver container declared']);
  const problems: string[] = [];
  const aliases = geoserver.networks.flatMap((n) => n.aliases).concat('geoserver');
  const site = caddySites(stack.caddyfile).find((s) => s.body.some((l) => aliases.some((a) => new RegExp(`^reverse_proxy\\s+${a}:\\d+$`).test(l))));
  if (!site) problems.push('no proxy site routes to GeoServer');
  else {
    const forward = site.body.findIndex((l) => /^forward_auth\s/.test(l));
    if (forward < 0) problems.push(`${site.address} sends GeoServer writes without asking the API (no forward_auth)`);
    for (const header of IDENTITY_HEADERS) {
      const strip = site.body.indexOf(`request_header -${header}`);
      if (strip < 0 || (forward >= 0 && strip > forward)) problems.push(`${site.address} lets clients send ${header} to GeoServer (no request_header -${header} before forward_auth)`);
      const copied = site.body.some((l, i) => i > forward && forward >= 0 && /^copy_headers\s/.test(l) && l.split(/\s+/).includes(header));
      if (!copied) problems.push(`${site.address} does not copy ${header} from the API's answer`);
    }
  }
  const allowed = new Set(['geoserver', 'proxy', 'features-db', 'geoserver-provision']);
  for (const attachment of geoserver.networks) {
    const others = stack.containers.filter((c) => !allowed.has(c.name) && c.networks.some((n) => n.name === attachment.name));
    if (others.length > 0) problems.push(`GeoServer shares ${attachment.name} with ${others.map((c) => c.name).join(', ')}, which could send it identity headers`);
  }
  const provision = stack.containers.find((c) => c.name === 'geoserver-provision');
  if (!provision?.env.GEOSERVER_DATA_DIR || !provision.volumes.some((v) => v.containerPath === provision.env.GEOSERVER_DATA_DIR)) {
    problems.push('geoserver-provision does not mount GeoServer\'s data directory (GEOSERVER_DATA_DIR): the header authentication is never written');
  }
  return verdict(problems);
}

/** The secret entry the declared stack gives for a name, if any. */
function secretSource(stack: DeclaredStack, name: string): NonNullable<DeclaredStack['secrets']>[number] | undefined {
  return stack.secrets?.find((s) => s.name === name);
}

/** No secret of the program in plain text in the stack file (it is committed; only `secure:` values belong there). */
export function checkStackFileSecrets(stack: DeclaredStack): Verdict {
  return verdict((stack.secrets ?? []).filter((s) => s.source === 'plain text in the stack file').map((s) => `${s.name} is in plain text in the stack file (pulumi config set --secret ${s.name} …)`));
}

/**
 * Hydra's secrets.system reaches Hydra as a Pulumi secret, and is at least 32 characters: generated by
 * the program with that length, or set encrypted in the stack file, where `pulumi preview` refuses a
 * shorter one (infra/secrets.ts; the check never decrypts it).
 */
export function checkHydraSystemSecret(stack: DeclaredStack): Verdict {
  const hydra = stack.containers.find((c) => c.name === 'hydra');
  if (!hydra) return verdict(['no hydra container declared']);
  const problems: string[] = [];
  if (!hydra.env.SECRETS_SYSTEM) problems.push('hydra receives no SECRETS_SYSTEM');
  else if (!hydra.envIsSecret) problems.push('hydra receives SECRETS_SYSTEM outside a Pulumi secret');
  const source = secretSource(stack, 'hydraSystemSecret');
  if (!source) problems.push('the declared stack does not say where hydraSystemSecret comes from');
  else if (source.source === 'plain text in the stack file') problems.push('hydraSystemSecret is in plain text in the stack file');
  else if (source.source === 'generated' && (source.length ?? 0) < 32) problems.push(`hydraSystemSecret is generated with ${source.length ?? 0} characters, fewer than 32`);
  return verdict(problems);
}

const hostOf = (url: string): string | undefined => {
  try {
    return new URL(url).hostname.toLowerCase();
  } catch {
    return undefined;
  }
};

/**
 * Every URL through which a container reaches an Ory admin API names an address on an internal network
 * (an alias of Kratos or Hydra there), never a public host: the proxy's sites, the cookie domain.
 */
export function checkAdminUrls(stack: DeclaredStack): Verdict {
  const problems: string[] = [];
  const internalNetworks = new Set(stack.networks.filter((n) => n.internal).map((n) => n.name));
  const adminHosts = new Set(
    stack.containers
      .filter((c) => c.name === 'kratos' || c.name === 'hydra')
      .flatMap((c) => c.networks.filter((n) => internalNetworks.has(n.name)).flatMap((n) => [...n.aliases, ...(n.ipv4Address ? [n.ipv4Address] : [])]))
      .map((a) => a.toLowerCase()),
  );
  const publicHosts = new Set(caddySites(stack.caddyfile).map((s) => s.address.toLowerCase()));
  for (const c of stack.containers) {
    for (const key of ['KRATOS_ADMIN_URL', 'HYDRA_ADMIN_URL']) {
      const value = c.env[key];
      if (value === undefined) continue;
      const host = hostOf(value);
      if (!host) problems.push(`${c.name}'s ${key} is no URL`);
      else if (publicHosts.has(host) || within(host, stack.parentDomain)) problems.push(`${c.name}'s ${key} points at a public host (${host})`);
      else if (!adminHosts.has(host)) problems.push(`${c.name}'s ${key} (${host}) is no address of Kratos or Hydra on an internal network`);
    }
  }
  return verdict(problems);
}

/** Sane bounds for one container on one host: a limit above them is no limit. */
export const CONTAINER_BOUNDS = { memoryMb: 16_384, cpus: 8, processes: 4_096 } as const;

/**
 * Every container has a memory limit (without swap on top) and a CPU limit, within CONTAINER_BOUNDS,
 * and its processes limit (the nproc ulimit, where declared) too: one runaway container must not take
 * the host.
 */
export function checkContainerLimits(stack: DeclaredStack): Verdict {
  const problems: string[] = [];
  for (const c of stack.containers) {
    const limits = c.limits ?? {};
    if (!limits.memoryMb || limits.memoryMb <= 0) problems.push(`${c.name} has no memory limit`);
    else if (limits.memoryMb > CONTAINER_BOUNDS.memoryMb) problems.push(`${c.name}'s memory limit ${limits.memoryMb} MiB is over ${CONTAINER_BOUNDS.memoryMb} MiB`);
    if (limits.memoryMb && limits.memorySwapMb !== undefined && limits.memorySwapMb !== limits.memoryMb) problems.push(`${c.name} may swap (memory_swap ${limits.memorySwapMb} MiB, memory ${limits.memoryMb} MiB)`);
    if (!limits.cpus || limits.cpus <= 0) problems.push(`${c.name} has no CPU limit`);
    else if (limits.cpus > CONTAINER_BOUNDS.cpus) problems.push(`${c.name}'s CPU limit ${limits.cpus} is over ${CONTAINER_BOUNDS.cpus} cores`);
    if (limits.processes !== undefined && (limits.processes <= 0 || limits.processes > CONTAINER_BOUNDS.processes)) problems.push(`${c.name}'s processes limit ${limits.processes} is not within 1–${CONTAINER_BOUNDS.processes}`);
  }
  return verdict(problems);
}

/** Kratos' variable with the social sign-in providers, client secrets included (services/shared/identity-config/render.ts). */
const OIDC_PROVIDERS_ENV = 'SELFSERVICE_METHODS_OIDC_CONFIG_PROVIDERS';

/** Whether Kratos is declared with social sign-in providers (the checklist then shows the item below). */
export function declaresOidcProviders(stack: DeclaredStack): boolean {
  return Boolean(stack.containers.find((c) => c.name === 'kratos')?.env[OIDC_PROVIDERS_ENV]?.trim());
}

/**
 * Every social sign-in provider Kratos receives has a client secret (Apple signs its own), inside a
 * Pulumi secret. A secret the stack file holds encrypted is never decrypted here, so a provider
 * without one passes when the stack file has an encrypted OIDC entry; `identity:check` and Kratos
 * itself check each one when the real value is known.
 */
export function checkOidcSecrets(stack: DeclaredStack): Verdict {
  const kratos = stack.containers.find((c) => c.name === 'kratos');
  const raw = kratos?.env[OIDC_PROVIDERS_ENV];
  if (!kratos || !raw) return verdict([]);
  let providers: unknown;
  try {
    providers = JSON.parse(raw);
  } catch {
    return verdict([`kratos's ${OIDC_PROVIDERS_ENV} is not JSON`]);
  }
  if (!Array.isArray(providers)) return verdict([`kratos's ${OIDC_PROVIDERS_ENV} is not a list of providers`]);
  const problems: string[] = [];
  if (!kratos.envIsSecret) problems.push(`kratos receives ${OIDC_PROVIDERS_ENV} (with the client secrets) outside a Pulumi secret`);
  const encrypted = (stack.secrets ?? []).some((s) => /oidc/i.test(s.name) && s.source === 'stack file');
  providers.forEach((entry: unknown, i) => {
    const provider = (entry ?? {}) as Record<string, unknown>;
    const id = typeof provider.id === 'string' ? provider.id : `#${i}`;
    const secret = provider.client_secret;
    if (provider.provider !== 'apple' && (typeof secret !== 'string' || secret.trim() === '') && !encrypted) problems.push(`the social sign-in provider ${id} has no client secret`);
  });
  return verdict(problems);
}
