import { createHash } from 'node:crypto';
import { isTransientStatus, retry, RetryError, type RetryOptions } from '../../services/shared/retry.js';
import { expectOk, GeoServerError, parseJson, type GeoServerClient } from './client.js';
import { ensureHeaderAuthentication, type HeaderAuthentication } from './security.js';
import { renderStyles, revisionOf, type RenderedStyle } from './styles.js';

/**
 * GeoServer provisioning: brings a running GeoServer to the platform's desired configuration through
 * its REST API, idempotently. Every step reads the current state first and writes only what differs,
 * so a second run against an unchanged server sends no write request at all, and a run after manual
 * drift repairs exactly the drifted parts.
 *
 * Desired state
 *   workspace     <workspace> (namespace URI <namespaceUri>)
 *   datastore     PostGIS, schema `features`, primary keys exposed (WFS-T inserts need them)
 *   feature types <layer> on table features.<layer> (editors), and <publicLayer> on the view
 *                 features.<publicLayer> (migration 012: approved features only, without telefon,
 *                 created_by, updated_by), both EPSG:4326; GeoServer creates a layer with each
 *   styles        one SLD per kategorie plus a combined default; both layers offer all of them
 *   WFS           service level TRANSACTIONAL; WMS enabled with version 1.3.0
 *   security      layer ACL: the public layer readable by everyone (*); the table layer readable and
 *                 writable by the write roles only; service ACL: wfs.Transaction for the write roles
 *   identity      (with dataDir) the HTTP-header authentication filter and its chain (security.ts),
 *                 then POST /reload; the store's session startup SQL hands ${GSUSER} to the history
 *
 * CORS is not a REST setting: in the official image it is a web.xml filter written at start from the
 * CORS_* environment variables, which the Pulumi program sets from the platform's domains.
 */

export interface ProvisionOptions {
  workspace: string;
  namespaceUri: string;
  datastore: string;
  database: { host: string; port: number; name: string; schema: string; user: string; password: string };
  layer: string;
  /** The view anonymous readers get (features.public_features, migration 012). */
  publicLayer: string;
  geometryProperty: string;
  title: string;
  /** Roles that may read the public layer ('*' = everyone, anonymous included). */
  readRoles: string;
  /** Roles that may read and write the table layer and run wfs.Transaction. */
  writeRoles: string;
  /**
   * GeoServer's data directory as this process sees it (the stack mounts GeoServer's volume into the
   * provisioning job): where the header authentication is written. Without it, WFS-T users are
   * GeoServer accounts only.
   */
  dataDir?: string;
  headerAuthentication?: HeaderAuthentication;
  /** How long to wait for GeoServer's REST API to answer (it starts slowly). */
  readyTimeoutMs?: number;
  /** The first wait between two attempts while it starts (doubled per attempt, up to 10 s, with jitter). */
  readyPollMs?: number;
  /** Told before each wait (the command logs it). */
  onRetry?: RetryOptions['onRetry'];
}

export interface ProvisionReport {
  /** What was written, e.g. "created workspace geodata"; empty when nothing had to change. */
  changes: string[];
}

type Entry = { '@key': string; $: string };

const MANAGED = 'managed by geodata provisioning';

/**
 * GeoTools' JDBC "Session startup SQL" / "Session close-up SQL": run on every connection GeoServer
 * takes from and returns to the pool. GeoServer replaces ${GSUSER} with the authenticated user (the
 * X-Geodata-User of the proxy) and the default after the comma when there is none. A SET with an
 * unquoted value: GeoTools lets only identifier-shaped values into session SQL
 * (org.geotools.jdbc.allowedSessionVariableValues, default ^[a-z_][a-z0-9_$]{0,62}$), so nothing a
 * user name holds can become SQL. The history trigger trusts the setting only from the geoserver
 * role (migration 013).
 */
export const SESSION_STARTUP_SQL = 'SET geodata.gs_user = ${GSUSER,anonymous}';
export const SESSION_CLOSEUP_SQL = 'RESET geodata.gs_user';

/**
 * Newer GeoTools refuse any session SQL but SET SESSION AUTHORIZATION unless these system properties
 * allow it (Java regular expressions, matched against the SQL before substitution). The stack passes
 * them to GeoServer's JVM in JAVA_TOOL_OPTIONS, which the JVM reads itself (no shell word splitting
 * or quoting in between), so they contain no whitespace.
 */
export const SESSION_SQL_JAVA_OPTIONS = [
  `-Dorg.geotools.jdbc.allowedSessionStartupSql=^SET\\sgeodata\\.gs_user\\s=\\s\\$\\{GSUSER,anonymous\\}$`,
  `-Dorg.geotools.jdbc.allowedSessionCloseupSql=^RESET\\sgeodata\\.gs_user$`,
];

/** XStream's JSON turns one-element lists into a bare object; read both. */
function asList<T>(value: T | T[] | undefined): T[] {
  if (value === undefined || value === null) return [];
  return Array.isArray(value) ? value : [value];
}

function normalizeRoles(roles: string): string {
  return roles.split(',').map((r) => r.trim()).filter(Boolean).sort().join(',');
}

/** A fingerprint of the connection credentials: GeoServer never returns the password in clear. */
function credentialsFingerprint(db: ProvisionOptions['database']): string {
  return createHash('sha256').update(`${db.user}\u0000${db.password}\u0000${db.host}\u0000${db.port}\u0000${db.name}`).digest('hex').slice(0, 16);
}

/**
 * Waits for GeoServer's REST API (it starts slowly): a refused connection, a timeout or a 5xx is tried
 * again with exponential backoff and jitter (services/shared/retry.ts, as the OAuth2 clients sync does)
 * until readyTimeoutMs; a 4xx fails at once (wrong credentials or a wrong URL do not fix themselves).
 */
export async function waitUntilReady(client: GeoServerClient, options: Pick<ProvisionOptions, 'readyTimeoutMs' | 'readyPollMs' | 'onRetry'>): Promise<void> {
  try {
    await retry(
      async () => {
        const response = await client.request('GET', '/workspaces');
        if (response.status === 401 || response.status === 403) throw new GeoServerError('GET', '/workspaces', response.status, 'check GEOSERVER_ADMIN_USER and GEOSERVER_ADMIN_PASSWORD');
        expectOk('GET', '/workspaces', response);
      },
      {
        deadlineMs: options.readyTimeoutMs ?? 300_000,
        initialDelayMs: options.readyPollMs ?? 500,
        retryable: (error) => error instanceof GeoServerError && (error.status === 0 || isTransientStatus(error.status)),
        ...(options.onRetry ? { onRetry: options.onRetry } : {}),
      },
    );
  } catch (error) {
    if (error instanceof RetryError) throw new Error(`GeoServer REST API not ready in time (${error.message})`);
    throw error;
  }
}

export async function provisionGeoServer(client: GeoServerClient, options: ProvisionOptions): Promise<ProvisionReport> {
  const changes: string[] = [];
  await waitUntilReady(client, options);
  await ensureWorkspace(client, options, changes);
  await ensureDatastore(client, options, changes);
  await ensureFeatureType(client, options, options.layer, options.title, changes);
  await ensureFeatureType(client, options, options.publicLayer, `${options.title} (approved)`, changes);
  const styles = renderStyles(options.layer, options.geometryProperty);
  for (const style of [...styles.perKategorie, styles.combined]) await ensureStyle(client, options.workspace, style, changes);
  for (const layer of [options.layer, options.publicLayer]) await ensureLayerStyles(client, options, layer, styles.combined, styles.perKategorie, changes);
  await ensureWfsTransactional(client, changes);
  await ensureWms130(client, changes);
  const tableRule = `${options.workspace}.${options.layer}`;
  const publicRule = `${options.workspace}.${options.publicLayer}`;
  await ensureAclRules(
    client,
    '/security/acl/layers',
    { [`${publicRule}.r`]: options.readRoles, [`${tableRule}.r`]: options.writeRoles, [`${tableRule}.w`]: options.writeRoles },
    changes,
  );
  await ensureAclRules(client, '/security/acl/services', { 'wfs.Transaction': options.writeRoles }, changes);
  if (options.dataDir && options.headerAuthentication) {
    const written = ensureHeaderAuthentication(options.dataDir, options.headerAuthentication);
    if (written.length > 0) {
      changes.push(...written);
      await client.send('POST', '/reload', {});
      changes.push('reloaded the configuration from disk');
    }
  }
  return { changes };
}

async function ensureWorkspace(client: GeoServerClient, o: ProvisionOptions, changes: string[]): Promise<void> {
  const path = `/workspaces/${encodeURIComponent(o.workspace)}`;
  if (await client.find(path)) return;
  await client.send('POST', '/workspaces', { json: { workspace: { name: o.workspace } } });
  changes.push(`created workspace ${o.workspace}`);
}

function desiredConnection(o: ProvisionOptions): Record<string, string> {
  return {
    dbtype: 'postgis',
    host: o.database.host,
    port: String(o.database.port),
    database: o.database.name,
    schema: o.database.schema,
    user: o.database.user,
    namespace: o.namespaceUri,
    'Expose primary keys': 'true',
    'Loose bbox': 'true',
    'Estimated extends': 'false',
    'validate connections': 'true',
    'max connections': '10',
    'min connections': '1',
    preparedStatements: 'true',
    'Session startup SQL': SESSION_STARTUP_SQL,
    'Session close-up SQL': SESSION_CLOSEUP_SQL,
  };
}

async function ensureDatastore(client: GeoServerClient, o: ProvisionOptions, changes: string[]): Promise<void> {
  const collection = `/workspaces/${encodeURIComponent(o.workspace)}/datastores`;
  const path = `${collection}/${encodeURIComponent(o.datastore)}`;
  const wanted = desiredConnection(o);
  const description = `${MANAGED}; credentials ${credentialsFingerprint(o.database)}`;
  const body = {
    dataStore: {
      name: o.datastore,
      description,
      enabled: true,
      connectionParameters: { entry: [...Object.entries(wanted), ['passwd', o.database.password]].map(([k, v]) => ({ '@key': k, $: v })) },
    },
  };
  const existing = await client.find(path);
  if (!existing) {
    await client.send('POST', collection, { json: body });
    changes.push(`created datastore ${o.datastore}`);
    return;
  }
  const current = parseJson<{ dataStore: { description?: string; enabled?: boolean | string; connectionParameters?: { entry?: Entry | Entry[] } } }>('GET', path, existing).dataStore;
  const params = Object.fromEntries(asList(current.connectionParameters?.entry).map((e) => [e['@key'], String(e.$)]));
  const drift = Object.entries(wanted).filter(([k, v]) => params[k] !== v).map(([k]) => k);
  if (current.description !== description) drift.push('credentials');
  if (String(current.enabled) !== 'true') drift.push('enabled');
  if (drift.length === 0) return;
  await client.send('PUT', path, { json: body });
  changes.push(`updated datastore ${o.datastore} (${drift.join(', ')})`);
}

async function ensureFeatureType(client: GeoServerClient, o: ProvisionOptions, layer: string, title: string, changes: string[]): Promise<void> {
  const collection = `/workspaces/${encodeURIComponent(o.workspace)}/datastores/${encodeURIComponent(o.datastore)}/featuretypes`;
  const path = `${collection}/${encodeURIComponent(layer)}`;
  const wanted = { name: layer, nativeName: layer, title, srs: 'EPSG:4326' };
  const existing = await client.find(path);
  if (!existing) {
    await client.send('POST', collection, { json: { featureType: wanted } });
    changes.push(`published feature type ${o.workspace}:${layer}`);
    return;
  }
  const current = parseJson<{ featureType: Record<string, unknown> }>('GET', path, existing).featureType;
  const drift = (Object.keys(wanted) as (keyof typeof wanted)[]).filter((k) => current[k] !== wanted[k]);
  if (drift.length === 0) return;
  // recalculate= (empty) keeps GeoServer from recomputing bounds on a large table for a title change.
  await client.send('PUT', path, { json: { featureType: wanted }, query: { recalculate: '' } });
  changes.push(`updated feature type ${o.workspace}:${layer} (${drift.join(', ')})`);
}

async function ensureStyle(client: GeoServerClient, workspace: string, style: RenderedStyle, changes: string[]): Promise<void> {
  const path = `/workspaces/${encodeURIComponent(workspace)}/styles/${encodeURIComponent(style.name)}`;
  const sldType = 'application/vnd.ogc.sld+xml';
  // The style endpoint does not declare quietOnNotFound.
  const existing = await client.find(path, { accept: sldType }, { quietOnNotFound: false });
  if (!existing) {
    await client.send('POST', `/workspaces/${encodeURIComponent(workspace)}/styles`, { query: { name: style.name }, raw: { body: style.sld, contentType: sldType } });
    changes.push(`created style ${workspace}:${style.name}`);
    return;
  }
  if (revisionOf(existing.text) === style.revision) return;
  await client.send('PUT', path, { raw: { body: style.sld, contentType: sldType } });
  changes.push(`updated style ${workspace}:${style.name}`);
}

async function ensureLayerStyles(client: GeoServerClient, o: ProvisionOptions, layer: string, defaultStyle: RenderedStyle, alternates: RenderedStyle[], changes: string[]): Promise<void> {
  const qualified = (name: string) => `${o.workspace}:${name}`;
  const path = `/layers/${encodeURIComponent(qualified(layer))}`;
  const current = (await client.getJson<{ layer: { defaultStyle?: { name?: string }; styles?: { style?: { name: string } | { name: string }[] } } }>(path)).layer;
  const wantedDefault = qualified(defaultStyle.name);
  const wantedAlternates = alternates.map((s) => qualified(s.name)).sort();
  const currentAlternates = asList(current.styles?.style).map((s) => s.name).sort();
  if (current.defaultStyle?.name === wantedDefault && JSON.stringify(currentAlternates) === JSON.stringify(wantedAlternates)) return;
  await client.send('PUT', path, {
    json: {
      layer: {
        defaultStyle: { name: wantedDefault },
        styles: { '@class': 'linked-hash-set', style: wantedAlternates.map((name) => ({ name })) },
      },
    },
  });
  changes.push(`set styles of layer ${qualified(layer)}`);
}

async function ensureWfsTransactional(client: GeoServerClient, changes: string[]): Promise<void> {
  const current = (await client.getJson<{ wfs: { enabled?: boolean | string; serviceLevel?: string } }>('/services/wfs/settings')).wfs;
  if (String(current.enabled) === 'true' && current.serviceLevel === 'TRANSACTIONAL') return;
  await client.send('PUT', '/services/wfs/settings', { json: { wfs: { enabled: true, serviceLevel: 'TRANSACTIONAL' } } });
  changes.push('set WFS service level TRANSACTIONAL');
}

type VersionList = { 'org.geotools.util.Version'?: { version: string } | { version: string }[] };

async function ensureWms130(client: GeoServerClient, changes: string[]): Promise<void> {
  const current = (await client.getJson<{ wms: { enabled?: boolean | string; versions?: VersionList } }>('/services/wms/settings')).wms;
  const versions = asList(current.versions?.['org.geotools.util.Version']).map((v) => v.version);
  if (String(current.enabled) === 'true' && versions.includes('1.3.0')) return;
  const wanted = [...new Set([...versions, '1.1.1', '1.3.0'])].sort();
  await client.send('PUT', '/services/wms/settings', {
    json: { wms: { enabled: true, versions: { 'org.geotools.util.Version': wanted.map((version) => ({ version })) } } },
  });
  changes.push('enabled WMS 1.3.0');
}

/** Add missing rules (POST) and correct differing ones (PUT); rules of others stay untouched. */
async function ensureAclRules(client: GeoServerClient, path: '/security/acl/layers' | '/security/acl/services', wanted: Record<string, string>, changes: string[]): Promise<void> {
  const current = await client.getJson<Record<string, string>>(path);
  const missing: Record<string, string> = {};
  const differing: Record<string, string> = {};
  for (const [rule, roles] of Object.entries(wanted)) {
    if (current[rule] === undefined) missing[rule] = roles;
    else if (normalizeRoles(current[rule]) !== normalizeRoles(roles)) differing[rule] = roles;
  }
  if (Object.keys(missing).length > 0) {
    await client.send('POST', path, { json: missing });
    changes.push(`added ACL rules ${Object.keys(missing).join(', ')}`);
  }
  if (Object.keys(differing).length > 0) {
    await client.send('PUT', path, { json: differing });
    changes.push(`corrected ACL rules ${Object.keys(differing).join(', ')}`);
  }
}
