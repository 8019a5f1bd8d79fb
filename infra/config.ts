import * as pulumi from '@pulumi/pulumi';
import { isAbsolute, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { getDomain } from 'tldts';
import { z } from 'zod';
import { loadTargets, type Target } from '../services/shared/targets.js';

/**
 * The stack's configuration, read once from Pulumi config (`pulumi config set [--secret] <key> <value>`)
 * and validated with zod so a wrong value fails `pulumi preview` with a message naming the key.
 * Secrets are never read here: see secrets.ts (config secret or a generated RandomPassword).
 */

export const REPO_ROOT = resolve(fileURLToPath(new URL('..', import.meta.url)));

const hostName = z.string().regex(/^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}$/i, 'a fully qualified host name');
const cidr = z.string().regex(/^(\d{1,3}\.){3}\d{1,3}\/\d{1,2}$|^[0-9a-f:]+\/\d{1,3}$/i, 'a CIDR range such as 10.0.0.0/8');

export const DomainsSchema = z
  .object({
    /** The feature API (Express). */
    api: hostName,
    /** GeoServer (WMS/WFS under /geoserver). */
    geo: hostName,
    /** The login/consent/logout app: Hydra's login and consent URLs point here. */
    auth: hostName,
    /** Kratos public API (self-service flows, whoami). */
    kratos: hostName,
    /** Hydra public API (OAuth2/OIDC issuer). */
    hydra: hostName,
    /** The Kratos self-service UI (registration, recovery, verification, settings). */
    accounts: hostName,
    /** The deployment webhook server (git hosts post pushes here). */
    webhook: hostName,
  })
  .strict();

export type Domains = z.infer<typeof DomainsSchema>;

/**
 * One social sign-in provider as Kratos' `oidc` method takes it, minus the client secret (a Pulumi
 * secret, oidcClientSecrets). `generic` is any issuer with discovery (Keycloak, Microsoft Entra ID v2.0
 * …); `mapper` picks identity/config/oidc/<mapper>.jsonnet, which maps e-mail and name, never a role.
 * The redirect URI to register at the provider: https://<domains.kratos>/self-service/methods/oidc/callback/<id>.
 */
export const OidcProviderSchema = z
  .object({
    id: z.string().regex(/^[a-z0-9][a-z0-9_-]{0,62}$/, 'lower-case letters, digits, - or _ (part of the redirect URI)'),
    provider: z.enum(['generic', 'microsoft', 'github', 'gitlab', 'google', 'auth0']),
    label: z.string().min(1).max(80).optional(),
    client_id: z.string().min(1),
    issuer_url: z.string().url().startsWith('https://').optional(),
    scope: z.array(z.string().min(1)).optional(),
    microsoft_tenant: z.string().min(1).optional(),
    mapper: z.enum(['generic', 'github']).optional(),
  })
  // No client_secret or other key: the secret is the Pulumi secret oidcClientSecrets.
  .strict();

/**
 * Where the stack runs: `docker`, every container on one Docker host (infra/stack.ts), or `kubernetes`,
 * the same parts on a cluster (infra/k8s/stack.ts, settings in the `kubernetes` key, infra/k8s/config.ts).
 */
export const TARGETS = ['docker', 'kubernetes'] as const;

export const StackConfigSchema = z.object({
  target: z.enum(TARGETS),
  domains: DomainsSchema,
  acmeEmail: z.string().email(),
  internalCidrs: z.array(cidr).min(1),
  targetsFile: z.string().min(1),
  identityConfigDir: z.string().min(1),
  imageTag: z.string().regex(/^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$/, 'a Docker tag'),
  identityDiskLimit: z.boolean(),
  identityDiskSize: z.string().regex(/^\d+[KMGT]?$/, 'a size such as 10G'),
  apiAudience: z.string().min(1),
  geoserverAdminUser: z.string().regex(/^[A-Za-z0-9_.-]+$/),
  backupIntervalHours: z.number().int().min(1).max(168),
  backupRetentionDays: z.number().int().min(1).max(3650),
  logLevel: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace']),
  namePrefix: z.string().regex(/^[a-z][a-z0-9-]{0,30}$/, 'lower-case letters, digits and dashes'),
  /** Parent domain of every site: the Kratos session cookie is set on it (SSO across subdomains). */
  parentDomain: hostName,
  /** Where users land after login or logout without a return URL. */
  appUrl: z.string().url().startsWith('https://'),
  /** Sender address of verification and recovery mails. */
  smtpFrom: z.string().email(),
  /** Run the official Kratos self-service UI container at domains.accounts. */
  selfServiceUi: z.boolean(),
  /**
   * Social sign-in providers (docs/identity.md "Social sign-in"), each without its secret: the client
   * secrets are the Pulumi secret oidcClientSecrets, a JSON object by provider id (loadOidcClientSecrets).
   * The stack hands both to Kratos as IDENTITY_OIDC_PROVIDERS and KRATOS_OIDC_CLIENT_SECRETS
   * (services/shared/identity-config/render.ts containerEnvironment). Empty: no social sign-in.
   */
  oidcProviders: z.array(OidcProviderSchema).max(20),
  /** Subnet of the internal admin network; Kratos and Hydra bind their admin APIs to fixed addresses in it. */
  adminSubnet: z.string().regex(/^(\d{1,3}\.){3}0\/24$/, 'an IPv4 /24 such as 10.213.0.0/24'),
  /** Subnet of the public edge network (the proxy's). Must not overlap internalCidrs, see checkEdgeSubnet. */
  edgeSubnet: z.string().regex(/^(\d{1,3}\.){3}0\/24$/, 'an IPv4 /24 such as 172.30.0.0/24'),
  /**
   * Split into one /28 per deploy target: each target's site network (its site + the proxy). Must lie
   * outside internalCidrs, see checkSitesSubnet.
   */
  sitesSubnet: z.string().regex(/^(\d{1,3}\.){3}0\/24$/, 'an IPv4 /24 such as 172.30.1.0/24'),
  /** The package registry builds may reach through the egress proxy (https only). */
  npmRegistry: z.string().url().startsWith('https://'),
  /**
   * The QC worker's plain settings, by the names docs/qc.md gives them (OSM_API_URL, WIKIBASE_URL,
   * AGENCY_WEBHOOK_URL, REVIEWER_EMAILS, …). Credentials are never here: they are the secrets
   * osmAccessToken, wikibasePassword, wikibaseOauth2Token, agencyWebhookSecret and exportsSmtpUrl.
   */
  exportSettings: z
    .record(z.string(), z.string().max(2000))
    .superRefine((settings, ctx) => {
      for (const name of Object.keys(settings)) {
        if (EXPORT_SECRET_NAMES.has(name)) ctx.addIssue({ code: 'custom', path: [name], message: 'a credential: set it as a secret (pulumi config set --secret), never in exportSettings' });
        else if (!/^(OSM|OVERPASS|WIKIBASE|EXPORT|AGENCY|FEATURE|MAIL|REVIEWER|QC)_[A-Z0-9_]{1,60}$/.test(name)) ctx.addIssue({ code: 'custom', path: [name], message: 'not a QC worker setting such as OSM_API_URL (docs/qc.md)' });
      }
    })
    .default({}),
});

/** The worker's credentials: set only through the Pulumi secrets named in infra/secrets.ts, never as plain exportSettings. */
export const EXPORT_SECRET_NAMES = new Set(['OSM_ACCESS_TOKEN', 'WIKIBASE_PASSWORD', 'WIKIBASE_OAUTH2_TOKEN', 'AGENCY_WEBHOOK_SECRET', 'SMTP_URL']);

export type StackConfig = z.infer<typeof StackConfigSchema> & {
  /** The deploy targets read with the shared loader (never re-parsed here). */
  targets: Target[];
};

/**
 * Sources that may reach /admin paths through the proxy: the operators' private ranges. Docker's own
 * default pools (172.16.0.0/12) are deliberately absent: when Docker's userland proxy forwards a
 * connection (IPv6 clients, hairpin traffic) the proxy sees the bridge gateway as the client, and that
 * address must not count as internal. See checkEdgeSubnet.
 */
export const DEFAULT_INTERNAL_CIDRS = ['10.0.0.0/8', '192.168.0.0/16'];

function resolveFromRepo(path: string): string {
  return isAbsolute(path) ? path : resolve(REPO_ROOT, path);
}

export function loadStackConfig(config: pulumi.Config = new pulumi.Config()): StackConfig {
  const raw = {
    target: config.get('target') ?? 'docker',
    domains: config.getObject<unknown>('domains'),
    acmeEmail: config.get('acmeEmail'),
    internalCidrs: config.getObject<unknown>('internalCidrs') ?? DEFAULT_INTERNAL_CIDRS,
    targetsFile: config.get('targetsFile') ?? 'config/targets.yaml',
    identityConfigDir: config.get('identityConfigDir') ?? 'identity/config',
    imageTag: config.get('imageTag') ?? '0.1.0',
    identityDiskLimit: config.getBoolean('identityDiskLimit') ?? false,
    identityDiskSize: config.get('identityDiskSize') ?? '10G',
    apiAudience: config.get('apiAudience') ?? 'geodata-api',
    geoserverAdminUser: config.get('geoserverAdminUser') ?? 'admin',
    backupIntervalHours: config.getNumber('backupIntervalHours') ?? 24,
    backupRetentionDays: config.getNumber('backupRetentionDays') ?? 14,
    logLevel: config.get('logLevel') ?? 'info',
    namePrefix: config.get('namePrefix') ?? 'geodata',
    parentDomain: config.get('parentDomain'),
    appUrl: config.get('appUrl'),
    smtpFrom: config.get('smtpFrom'),
    selfServiceUi: config.getBoolean('selfServiceUi') ?? true,
    oidcProviders: config.getObject<unknown>('oidcProviders') ?? [],
    adminSubnet: config.get('adminSubnet') ?? '10.213.0.0/24',
    edgeSubnet: config.get('edgeSubnet') ?? '172.30.0.0/24',
    sitesSubnet: config.get('sitesSubnet') ?? '172.30.1.0/24',
    npmRegistry: config.get('npmRegistry') ?? 'https://registry.npmjs.org/',
    exportSettings: config.getObject<unknown>('exportSettings') ?? {},
  };
  const parsed = StackConfigSchema.safeParse(raw);
  if (!parsed.success) {
    const detail = parsed.error.issues.map((i) => `${i.path.map(String).join('.') || '(root)'}: ${i.message}`).join('; ');
    throw new Error(`invalid stack configuration: ${detail}`);
  }
  checkEdgeSubnet(parsed.data.edgeSubnet, parsed.data.internalCidrs);
  checkSitesSubnet(parsed.data.sitesSubnet, parsed.data.internalCidrs);
  const targetsFile = resolveFromRepo(parsed.data.targetsFile);
  const targets = loadTargets(targetsFile);
  checkPreviewDomains(targets, parsed.data.parentDomain);
  return {
    ...parsed.data,
    targetsFile,
    identityConfigDir: resolveFromRepo(parsed.data.identityConfigDir),
    targets,
  };
}

/**
 * The client secrets of the social sign-in providers: the Pulumi secret `oidcClientSecrets`, a JSON
 * object by provider id (`pulumi config set --secret oidcClientSecrets '{"entra":"…"}'`). Undefined
 * without providers; identity:check and the stack's render refuse a provider whose secret is missing.
 */
export function loadOidcClientSecrets(config: pulumi.Config = new pulumi.Config()): pulumi.Output<string> | undefined {
  return config.getSecret('oidcClientSecrets');
}

/**
 * A preview site: a target that deploys every branch of a family (`matchPattern: prefix`, e.g.
 * feature/team-de1/…). Anyone who can push such a branch runs code there, so it must not be a
 * same-site neighbour of the platform.
 */
export function isPreviewTarget(target: Pick<Target, 'matchPattern'>): boolean {
  return target.matchPattern === 'prefix';
}

/** Whether `host` is `domain` or a subdomain of it (case-insensitive, no trailing dot). */
export function isWithinDomain(host: string, domain: string): boolean {
  const h = host.toLowerCase().replace(/\.$/, '');
  const d = domain.toLowerCase().replace(/\.$/, '');
  return h === d || h.endsWith(`.${d}`);
}

/**
 * Whether two hosts share a registrable domain (eTLD+1 by the Public Suffix List, private suffixes such
 * as github.io included, as browsers scope cookies): then one can set cookies the other receives.
 */
export function sameSite(a: string, b: string): boolean {
  const siteOf = (host: string) => getDomain(host.toLowerCase(), { allowPrivateDomains: true }) ?? host.toLowerCase();
  return siteOf(a) === siteOf(b);
}

/**
 * The SSO session cookie lives on parentDomain and is sent to every host under it. A preview site under
 * it would receive every visitor's `ory_kratos_session` and could call Kratos, Hydra, the API and GeoServer
 * as them; a preview domain above it could set cookies for it (cookie tossing). Either is refused: preview
 * sites live on a registrable domain of their own (the way user content lives on github.io, not github.com).
 */
export function checkPreviewDomains(targets: Target[], parentDomain: string): void {
  for (const target of targets.filter(isPreviewTarget)) {
    if (isWithinDomain(target.domain, parentDomain) || isWithinDomain(parentDomain, target.domain) || sameSite(target.domain, parentDomain)) {
      throw new Error(
        `invalid stack configuration: the preview site ${target.key} (${target.domain}) lies within the session cookie domain ${parentDomain}; ` +
          'put preview sites on a registrable domain of their own (see docs/infra.md, "Preview sites")',
      );
    }
  }
}

/**
 * The sites network holds untrusted code. If its addresses counted as internal, that code could reach
 * /admin*, /geoserver/rest and /geoserver/web through the proxy. Refuse an overlap.
 */
export function checkSitesSubnet(sitesSubnet: string, internalCidrs: string[]): void {
  const first = sitesSubnet.replace(/0\/24$/, '0');
  const last = sitesSubnet.replace(/0\/24$/, '255');
  const overlapping = internalCidrs.find((range) => ipv4InCidr(first, range) || ipv4InCidr(last, range) || ipv4InCidr(range.split('/')[0] ?? '', sitesSubnet));
  if (overlapping) {
    throw new Error(`invalid stack configuration: internalCidrs: ${overlapping} overlaps the sites network ${sitesSubnet}; pick a sitesSubnet outside the internal ranges`);
  }
}

function ipv4ToNumber(ip: string): number {
  return ip.split('.').reduce((acc, octet) => acc * 256 + Number(octet), 0);
}

/** Whether an IPv4 address lies in an IPv4 CIDR range (IPv6 ranges never contain an IPv4 address here). */
export function ipv4InCidr(ip: string, range: string): boolean {
  const [base, bitsText] = range.split('/');
  if (base === undefined || bitsText === undefined || base.includes(':')) return false;
  const bits = Number(bitsText);
  const size = 2 ** (32 - bits);
  const start = Math.floor(ipv4ToNumber(base) / size) * size;
  const value = ipv4ToNumber(ip);
  return value >= start && value < start + size;
}

/**
 * The edge network's gateway is the source address the proxy sees for connections Docker's userland
 * proxy relays. If that address counted as internal, every such client could reach /admin. Refuse it.
 */
export function checkEdgeSubnet(edgeSubnet: string, internalCidrs: string[]): void {
  const gateway = edgeSubnet.replace(/0\/24$/, '1');
  const overlapping = internalCidrs.find((range) => ipv4InCidr(gateway, range));
  if (overlapping) {
    throw new Error(
      `invalid stack configuration: internalCidrs: ${overlapping} contains the edge network gateway ${gateway}; ` +
        'pick an edgeSubnet outside the internal ranges (see docs/infra.md, "Admin paths")',
    );
  }
}

/**
 * The dumps' second target, off the host (docs/infra.md "Backups off the host"): an S3-compatible
 * bucket the backup-offsite container copies every dump to, encrypted. Unset: the dumps stay on the
 * host alone, and `pulumi up` warns. Its credentials are secrets (BACKUP_OFFSITE_SECRET_KEYS).
 */
export const BackupOffsiteSchema = z
  .object({
    /** The S3 API's https URL (https://s3.eu-central-1.amazonaws.com, a MinIO or Ceph gateway, …). */
    endpoint: z.string().url().startsWith('https://'),
    /** rclone's S3 provider name: AWS, Minio, Ceph, Wasabi, Scaleway, Other, … */
    provider: z.string().regex(/^[A-Za-z0-9]+$/, "one of rclone's S3 provider names, e.g. AWS or Other").default('Other'),
    region: z.string().regex(/^[a-z0-9-]+$/).default('us-east-1'),
    bucket: z.string().regex(/^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/, 'an S3 bucket name'),
    /** Folder inside the bucket, e.g. the stack's name. */
    prefix: z.string().regex(/^[A-Za-z0-9._-]+(\/[A-Za-z0-9._-]+)*$/, 'folder names of letters, digits, . _ - separated by /').optional(),
    /** Access key id of a key that may write (and list) this bucket only; its secret is a Pulumi secret. */
    accessKeyId: z.string().regex(/^[A-Za-z0-9+/=._-]{3,128}$/),
    /** How often new dumps are copied. */
    intervalMinutes: z.number().int().min(5).max(1440).default(60),
  })
  .strict();

export type BackupOffsite = z.infer<typeof BackupOffsiteSchema>;

/**
 * `backupOffsite`, read apart from StackConfigSchema: it is optional, and a stack that sets it must
 * also set its secrets, which infra/Pulumi.example.yaml (a working stack without them) cannot hold.
 */
export function loadBackupOffsite(config: pulumi.Config = new pulumi.Config()): BackupOffsite | undefined {
  const raw = config.getObject<unknown>('backupOffsite');
  if (raw === undefined) return undefined;
  const parsed = BackupOffsiteSchema.safeParse(raw);
  if (!parsed.success) {
    const detail = parsed.error.issues.map((i) => `backupOffsite.${i.path.map(String).join('.')}: ${i.message}`).join('; ');
    throw new Error(`invalid stack configuration: ${detail}`);
  }
  return parsed.data;
}

/**
 * The off-host backup target's secrets (Pulumi secrets, required with backupOffsite): the bucket key's
 * secret, and the passphrase the dumps are encrypted with before they leave the host. Keep the
 * passphrase outside the platform too: without it no copy in the bucket can be read.
 */
export const BACKUP_OFFSITE_SECRET_KEYS = ['backupOffsiteSecretAccessKey', 'backupOffsitePassphrase'] as const;

export function loadBackupOffsiteSecrets(config: pulumi.Config = new pulumi.Config()): Record<(typeof BACKUP_OFFSITE_SECRET_KEYS)[number], pulumi.Output<string>> {
  const passphrase = config.requireSecret('backupOffsitePassphrase');
  return {
    backupOffsiteSecretAccessKey: config.requireSecret('backupOffsiteSecretAccessKey'),
    // Checked without revealing it: a short passphrase stops `pulumi up` with the key's name only.
    backupOffsitePassphrase: passphrase.apply((value) => {
      if (value.length < 24) throw new Error('invalid stack configuration: backupOffsitePassphrase must be at least 24 characters');
      return value;
    }),
  };
}
