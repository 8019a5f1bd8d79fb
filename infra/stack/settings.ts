import * as pulumi from '@pulumi/pulumi';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse as parseYaml, stringify as toYaml } from 'yaml';
import { containerEnvironment, OIDC_PROVIDERS_VARIABLE, OIDC_SECRETS_VARIABLE, renderTemplate, substitute, type ServiceName } from '../../services/shared/identity-config/render.js';
import type { StackConfig } from '../config.js';
import { SESSION_SQL_JAVA_OPTIONS } from '../geoserver/provision.js';
import { GEOSERVER_IDENTITY, UPSTREAMS } from '../routes.js';
import type { StackSecrets } from '../secrets.js';
import { https } from './common.js';

/**
 * What each service is told, the same on both targets (Docker, infra/stack/*.ts; Kubernetes,
 * infra/k8s/*.ts): the variables by the names the services own (services/api/src/config.ts,
 * identity/src/app/config.ts, docs/qc.md, GeoServer's image). A target only says where things are
 * (the addresses below) and how a secret reaches the process; it never writes a service's variables
 * itself, so a variable added here reaches the service on either target.
 */

/** Where a service finds the others, as the target names them (Docker aliases, Kubernetes Service names). */
export interface IdentityAddresses {
  /** Kratos' admin API, e.g. http://kratos-admin:4434. */
  kratosAdmin: string;
  /** Hydra's admin API, e.g. http://hydra-admin:4445. */
  hydraAdmin: string;
  /** Kratos' public API inside the platform (whoami without a round trip through the proxy). */
  kratosPublicInternal: string;
}

type Env = Record<string, pulumi.Input<string>>;

/** The feature API (services/api/src/config.ts owns these names). */
export function apiEnvironment(cfg: StackConfig, a: { databaseUrl: pulumi.Input<string>; identity: IdentityAddresses; origins: string[] }): Env {
  return {
    NODE_ENV: 'production',
    PORT: String(UPSTREAMS.api.port),
    DATABASE_URL: a.databaseUrl,
    AUTH_AUDIENCE: cfg.apiAudience,
    HYDRA_ADMIN_URL: a.identity.hydraAdmin,
    KRATOS_PUBLIC_URL: a.identity.kratosPublicInternal,
    KRATOS_ADMIN_URL: a.identity.kratosAdmin,
    // Browsers may call the API with the session cookie only from the platform's own sites.
    CORS_ORIGINS: a.origins.join(','),
    // Every request comes from the proxy, on a private network (Docker's private pools, a cluster's pod
    // range): its X-Forwarded-For names the client, the change limit's key for callers without
    // credentials (Caddy sets the header itself and drops what a client sent).
    API_TRUST_PROXY: 'uniquelocal',
    DATA_DIR: '/var/lib/api',
    // The QC worker runs apart (infra/stack/worker.ts, infra/k8s/worker.ts), the only one with a way out.
    WORKER_ENABLED: 'false',
    // A sign-out (its tokens revoked, its Kratos session ended) holds at the API within 10 s.
    INTROSPECTION_CACHE_SECONDS: '10',
    SESSION_CACHE_SECONDS: '10',
    LOG_LEVEL: cfg.logLevel,
  };
}

/** The QC worker: its plain settings, then its credentials (docs/qc.md). */
export function workerEnvironment(cfg: StackConfig, secrets: StackSecrets, databaseUrl: pulumi.Input<string>): Env {
  return {
    NODE_ENV: 'production',
    DATABASE_URL: databaseUrl,
    WEB_PUBLIC_URL: cfg.appUrl,
    MAIL_FROM: cfg.smtpFrom,
    LOG_LEVEL: cfg.logLevel,
    ...cfg.exportSettings,
    ...secrets.exportSecrets,
  };
}

/**
 * The login, consent and logout app (identity/src/app/config.ts, docs/identity.md). `limits`: the
 * login database its limiters count in (one budget for all its replicas) and how many replicas run.
 */
export function loginEnvironment(cfg: StackConfig, secrets: StackSecrets, identity: IdentityAddresses, limits: { databaseUrl: pulumi.Input<string>; replicas: number }): Env {
  const domains = cfg.domains;
  return {
    NODE_ENV: 'production',
    IDENTITY_PORT: String(UPSTREAMS.login.port),
    IDENTITY_AUTH_URL: https(domains.auth),
    IDENTITY_APP_URL: cfg.appUrl,
    KRATOS_PUBLIC_URL: https(domains.kratos),
    KRATOS_PUBLIC_INTERNAL_URL: identity.kratosPublicInternal,
    KRATOS_ADMIN_URL: identity.kratosAdmin,
    HYDRA_ADMIN_URL: identity.hydraAdmin,
    IDENTITY_COOKIE_SECRET: secrets.loginCookieSecret,
    ...(cfg.selfServiceUi ? { IDENTITY_ACCOUNTS_URL: https(domains.accounts) } : {}),
    // Only the proxy reaches the app (a private network): trust its X-Forwarded-For for rate limits.
    IDENTITY_TRUST_PROXY: 'uniquelocal',
    LOGIN_DATABASE_URL: limits.databaseUrl,
    IDENTITY_REPLICAS: String(limits.replicas),
    LOG_LEVEL: cfg.logLevel,
  };
}

/** The official Kratos self-service UI. */
export function accountsUiEnvironment(cfg: StackConfig, secrets: StackSecrets, identity: IdentityAddresses): Env {
  return {
    PORT: String(UPSTREAMS.accountsUi.port),
    KRATOS_PUBLIC_URL: identity.kratosPublicInternal,
    KRATOS_BROWSER_URL: https(cfg.domains.kratos),
    COOKIE_SECRET: secrets.accountsUiSecret,
    CSRF_COOKIE_NAME: '__Host-accounts-csrf',
    CSRF_COOKIE_SECRET: secrets.accountsUiSecret,
  };
}

/** The uid and gid GeoServer runs as and the provisioning job writes its data directory as. */
export const GEOSERVER_UID = '999';
export const GEOSERVER_DATA_DIR = '/opt/geoserver_data';

/** GeoServer (the official image's variables); `runAs` names the image's own privilege drop, where the target uses it. */
export function geoserverEnvironment(cfg: StackConfig, secrets: StackSecrets, origins: string[], runAs: 'image-drops-root' | 'already-unprivileged'): Env {
  return {
    GEOSERVER_ADMIN_USER: cfg.geoserverAdminUser,
    GEOSERVER_ADMIN_PASSWORD: secrets.geoserverAdminPassword,
    SKIP_DEMO_DATA: 'true',
    ...(runAs === 'image-drops-root'
      ? {
          RUN_UNPRIVILEGED: 'true',
          // Named, not left to the image's default: the provisioning job writes into the data directory as this user.
          RUN_WITH_USER_UID: GEOSERVER_UID,
          RUN_WITH_USER_GID: GEOSERVER_UID,
          CHANGE_OWNERSHIP_ON_FOLDERS: GEOSERVER_DATA_DIR,
        }
      : // The pod starts as GEOSERVER_UID (its securityContext); the volume's group is set by fsGroup.
        { RUN_UNPRIVILEGED: 'false', CHANGE_OWNERSHIP_ON_FOLDERS: '' }),
    PROXY_BASE_URL: `${https(cfg.domains.geo)}/geoserver`,
    // CORS is a web.xml filter in the official image; its startup script writes it from these.
    CORS_ENABLED: 'true',
    CORS_ALLOWED_ORIGINS: origins.join(','),
    CORS_ALLOWED_METHODS: 'GET,POST,PUT,DELETE,HEAD,OPTIONS',
    CORS_ALLOWED_HEADERS: 'Authorization,Content-Type,Accept,Origin,X-Requested-With',
    CORS_ALLOW_CREDENTIALS: 'true',
    EXTRA_JAVA_OPTS: '-Xms512m -Xmx1536m',
    // Lets the PostGIS store run the session SQL that names WFS-T users in the history (provision.ts).
    JAVA_TOOL_OPTIONS: SESSION_SQL_JAVA_OPTIONS.join(' '),
  };
}

/** The geoserver-provision job (infra/geoserver/cli.ts). */
export function geoserverProvisionEnvironment(cfg: StackConfig, secrets: StackSecrets, a: { geoserverUrl: string; dbHost: string; dbPort: string }): Env {
  return {
    GEOSERVER_URL: a.geoserverUrl,
    GEOSERVER_ADMIN_USER: cfg.geoserverAdminUser,
    GEOSERVER_ADMIN_PASSWORD: secrets.geoserverAdminPassword,
    GEOSERVER_DB_HOST: a.dbHost,
    GEOSERVER_DB_PORT: a.dbPort,
    GEOSERVER_DB_NAME: 'features',
    GEOSERVER_DB_USER: 'geoserver',
    GEOSERVER_DB_PASSWORD: secrets.geoserverDbPassword,
    GEOSERVER_NAMESPACE_URI: `${https(cfg.domains.geo)}/features`,
    // WFS-T writers are platform users with these roles (the API's forward-auth answer, X-Geodata-Role).
    GEOSERVER_WRITE_ROLES: 'ROLE_CONTRIBUTOR,ROLE_REVIEWER,ROLE_ADMIN',
    GEOSERVER_DATA_DIR,
    GEOSERVER_USER_HEADER: GEOSERVER_IDENTITY.userHeader,
    GEOSERVER_ROLE_HEADER: GEOSERVER_IDENTITY.roleHeader,
  };
}

/**
 * The identity files (identity/config/*.yml, clients.yaml) rendered with the stack's values: the same
 * Kratos and Hydra configuration on both targets, only the admin addresses and where the identity schema
 * is mounted differ. Secrets never enter these files; they reach Ory as its own variables.
 */
export function identityFiles(cfg: StackConfig, identity: IdentityAddresses, identitySchemaUrl: string) {
  const domains = cfg.domains;
  const templateEnv = {
    IDENTITY_PARENT_DOMAIN: cfg.parentDomain,
    IDENTITY_AUTH_URL: https(domains.auth),
    IDENTITY_ACCOUNTS_URL: cfg.selfServiceUi ? https(domains.accounts) : https(domains.auth),
    IDENTITY_APP_URL: cfg.appUrl,
    KRATOS_PUBLIC_URL: `${https(domains.kratos)}/`,
    KRATOS_ADMIN_URL: `${identity.kratosAdmin}/`,
    HYDRA_PUBLIC_URL: `${https(domains.hydra)}/`,
    HYDRA_ADMIN_URL: `${identity.hydraAdmin}/`,
    IDENTITY_SMTP_FROM: cfg.smtpFrom,
    KRATOS_IDENTITY_SCHEMA_URL: identitySchemaUrl,
    IDENTITY_API_AUDIENCE: cfg.apiAudience,
  };
  const rendered = (svc: ServiceName) => renderTemplate(svc, templateEnv, cfg.identityConfigDir);
  const kratos = rendered('kratos');
  const hydra = rendered('hydra');
  // The clients file is rendered here, with the stack's values, so the sync job needs no template variable.
  const clientsYml = toYaml(substitute(parseYaml(readFileSync(join(cfg.identityConfigDir, 'clients.yaml'), 'utf8')), templateEnv, 'clients.yaml:'));
  const identitySchema = readFileSync(join(cfg.identityConfigDir, 'identity.schema.json'), 'utf8');
  return { kratos, hydra, kratosYml: toYaml(kratos), hydraYml: toYaml(hydra), clientsYml, identitySchema };
}

/** Ory's own variable names for the secrets (services/shared/identity-config/render.ts owns the mapping). */
function oryEnvironment(cfg: StackConfig, svc: ServiceName, values: Record<string, pulumi.Input<string>>): pulumi.Output<Record<string, string>> {
  return pulumi.all(values).apply((resolved) => containerEnvironment(svc, resolved, cfg.identityConfigDir));
}

/** Kratos' secret variables: DSN, secrets, the courier's SMTP URI, the social sign-in providers with their client secrets. */
export function kratosSecretEnvironment(cfg: StackConfig, secrets: StackSecrets, dsn: pulumi.Input<string>): pulumi.Output<Record<string, string>> {
  return oryEnvironment(cfg, 'kratos', {
    KRATOS_DSN: dsn,
    KRATOS_SECRETS_DEFAULT: secrets.kratosDefaultSecret,
    KRATOS_SECRETS_COOKIE: secrets.kratosCookieSecret,
    KRATOS_SECRETS_CIPHER: secrets.kratosCipherSecret,
    KRATOS_SMTP_URI: secrets.smtpConnectionUri,
    // Social sign-in (docs/identity.md): the providers as declared, their client secrets from the
    // secret oidcClientSecrets; rendered together into Kratos' one secret providers variable.
    [OIDC_PROVIDERS_VARIABLE]: JSON.stringify(cfg.oidcProviders),
    ...(secrets.oidcClientSecrets ? { [OIDC_SECRETS_VARIABLE]: secrets.oidcClientSecrets } : {}),
  });
}

/** Hydra's secret variables: DSN and secrets. */
export function hydraSecretEnvironment(cfg: StackConfig, secrets: StackSecrets, dsn: pulumi.Input<string>): pulumi.Output<Record<string, string>> {
  return oryEnvironment(cfg, 'hydra', { HYDRA_DSN: dsn, HYDRA_SECRETS_SYSTEM: secrets.hydraSystemSecret, HYDRA_SECRETS_COOKIE: secrets.hydraCookieSecret });
}
