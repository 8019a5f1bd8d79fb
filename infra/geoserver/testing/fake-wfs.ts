import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';

/**
 * The part of GeoServer the WFS-T identity path depends on, behaving as GeoServer documents it:
 *
 * - security: on start (and on POST /rest/reload) the data directory's security/config.xml filter
 *   chains and security/filter/<name>/config.xml are read. A request is authenticated by the first
 *   chain whose ant paths match; a requestHeaderAuthentication filter in it takes the user from its
 *   principalHeaderAttribute and the roles (Header role source) from rolesHeaderAttribute, `basic`
 *   checks GeoServer's admin account, `anonymous` lets the rest through unauthenticated. Every
 *   authenticated user also has ROLE_AUTHENTICATED.
 * - authorisation: the service ACL wfs.Transaction and the layer ACL <ws>.<layer>.w; an anonymous
 *   caller is asked to authenticate (401), an authenticated one without a role is refused (403).
 * - the PostGIS store: every connection taken runs the store's "Session startup SQL" with ${GSUSER}
 *   replaced by the authenticated user name (the default after the comma when anonymous), and the
 *   "Session close-up SQL" when returned, under the GeoTools restrictions (SessionCommandsListener):
 *   the SQL must match org.geotools.jdbc.allowedSessionStartupSql / …CloseupSql (from the JVM options
 *   the stack declares; by default only SET SESSION AUTHORIZATION), and every substituted value must
 *   match allowedSessionVariableValues (default: an identifier).
 * - WFS-T: a Transaction with one or more Insert of <ws>:<layer> features whose properties are simple
 *   elements and whose geometry is a gml:Point; the answer is a wfs:TransactionResponse.
 * - reads (KVP GET, parameter names in any case): WFS GetFeature as GeoJSON (outputFormat
 *   application/json) and WMS GetMap as SVG (format image/svg+xml, one shape per feature drawn), from
 *   the layer's table or view through the store's connection, session SQL included. A layer the
 *   caller may not read (layer ACL <ws>.<layer>.r) is hidden, as in GeoServer's default catalog mode
 *   HIDE: WFS answers 400 "unknown", WMS a LayerNotDefined service exception. Other output formats
 *   are refused with 501 rather than guessed.
 */

export const DEFAULT_SECURITY_CONFIG = `<security>
  <roleServiceName>default</roleServiceName>
  <authProviderNames>
    <string>default</string>
  </authProviderNames>
  <configPasswordEncrypterName>pbePasswordEncoder</configPasswordEncrypterName>
  <filterChain>
    <filters name="web" class="org.geoserver.security.HtmlLoginFilterChain" interceptorName="interceptor" exceptionTranslationName="exception" path="/web/**,/gwc/rest/web/**,/" disabled="false" allowSessionCreation="true" ssl="false" matchHTTPMethod="false">
      <filter>rememberme</filter>
      <filter>form</filter>
      <filter>anonymous</filter>
    </filters>
    <filters name="rest" class="org.geoserver.security.ServiceLoginFilterChain" interceptorName="restInterceptor" exceptionTranslationName="exception" path="/rest.*,/rest/**" disabled="false" allowSessionCreation="false" ssl="false" matchHTTPMethod="false">
      <filter>basic</filter>
      <filter>anonymous</filter>
    </filters>
    <filters name="default" class="org.geoserver.security.ServiceLoginFilterChain" interceptorName="interceptor" exceptionTranslationName="exception" path="/**" disabled="false" allowSessionCreation="false" ssl="false" matchHTTPMethod="false">
      <filter>basic</filter>
      <filter>anonymous</filter>
    </filters>
  </filterChain>
</security>
`;

interface Chain {
  name: string;
  paths: RegExp[];
  filters: string[];
}

interface HeaderFilter {
  userHeader: string;
  roleHeader: string | undefined;
}

export interface WfsPrincipal {
  user: string | null;
  roles: string[];
}

export interface WfsStore {
  params: Record<string, string>;
  password: string;
}

export interface WfsContext {
  layerRules: Record<string, string>;
  serviceRules: Record<string, string>;
  /** The workspace's PostGIS store and the feature types published from it. */
  storeOf(workspace: string): { store: WfsStore; nativeNames: Map<string, string> } | undefined;
}

export interface WfsOptions {
  dataDir: string;
  /** Where this process reaches the store's host:port (the rehearsal maps Docker names to loopback). */
  resolveDatabase?: (host: string, port: number) => { host: string; port: number };
  /** The JVM options GeoServer was started with (JAVA_TOOL_OPTIONS): -D system properties are read. */
  jvmOptions?: string;
  admin: { user: string; password: string };
}

const antToRegExp = (pattern: string): RegExp =>
  new RegExp(`^${pattern.split('**').map((part) => part.replace(/[.+?^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '[^/]*')).join('.*')}$`);

/** A Java regular expression as GeoTools uses it with String.matches (whole string; (?i) prefix). */
function javaMatches(regex: string, value: string): boolean {
  const insensitive = regex.startsWith('(?i)');
  return new RegExp(`^(?:${insensitive ? regex.slice(4) : regex})$`, insensitive ? 'i' : '').test(value);
}

function systemProperties(jvmOptions = ''): Record<string, string> {
  const out: Record<string, string> = {};
  for (const word of jvmOptions.split(/\s+/)) {
    const match = /^-D([^=]+)=(.*)$/.exec(word);
    if (match) out[match[1]!] = match[2]!;
  }
  return out;
}

export class FakeWfs {
  private chains: Chain[] = [];
  private headerFilters = new Map<string, HeaderFilter>();
  private readonly properties: Record<string, string>;
  /** The session SQL statements run, in order (with ${GSUSER} substituted), for tests to read. */
  readonly sessionSql: string[] = [];

  constructor(private readonly options: WfsOptions) {
    this.properties = systemProperties(options.jvmOptions);
    const config = join(options.dataDir, 'security', 'config.xml');
    // GeoServer initialises an empty data directory with its default security configuration.
    if (!existsSync(config)) {
      mkdirSync(join(options.dataDir, 'security'), { recursive: true });
      writeFileSync(config, DEFAULT_SECURITY_CONFIG);
    }
    this.reload();
  }

  /** What GeoServer does at start and on /rest/reload: read the chains and filters from disk. */
  reload(): void {
    const xml = readFileSync(join(this.options.dataDir, 'security', 'config.xml'), 'utf8');
    this.chains = [...xml.matchAll(/<filters name="([^"]+)"[^>]*?path="([^"]*)"[^>]*>([\s\S]*?)<\/filters>/g)].map((m) => ({
      name: m[1]!,
      paths: m[2]!.split(',').map(antToRegExp),
      filters: [...m[3]!.matchAll(/<filter>([^<]+)<\/filter>/g)].map((f) => f[1]!),
    }));
    this.headerFilters.clear();
    const filterDir = join(this.options.dataDir, 'security', 'filter');
    for (const name of existsSync(filterDir) ? readdirSync(filterDir) : []) {
      const file = join(filterDir, name, 'config.xml');
      if (!existsSync(file)) continue;
      const text = readFileSync(file, 'utf8');
      if (!text.startsWith('<requestHeaderAuthentication>')) continue;
      const tag = (t: string) => new RegExp(`<${t}>([^<]*)</${t}>`).exec(text)?.[1];
      const userHeader = tag('principalHeaderAttribute');
      if (!userHeader) throw new Error(`${file}: no principalHeaderAttribute`);
      const roleSource = /<roleSource[^>]*>([^<]*)<\/roleSource>/.exec(text)?.[1];
      this.headerFilters.set(tag('name') ?? name, { userHeader, roleHeader: roleSource === 'Header' ? tag('rolesHeaderAttribute') : undefined });
    }
  }

  /** The chain GeoServer would use for a path under /geoserver. */
  chainFor(path: string): Chain | undefined {
    return this.chains.find((c) => c.paths.some((p) => p.test(path)));
  }

  authenticate(path: string, headers: Record<string, string | string[] | undefined>): WfsPrincipal {
    const header = (name: string) => {
      const value = headers[name.toLowerCase()];
      return Array.isArray(value) ? value[0] : value;
    };
    for (const filter of this.chainFor(path)?.filters ?? []) {
      const byHeader = this.headerFilters.get(filter);
      if (byHeader) {
        const user = header(byHeader.userHeader);
        if (user) {
          const roles = byHeader.roleHeader ? (header(byHeader.roleHeader) ?? '').split(/[;,]/).map((r) => r.trim()).filter(Boolean) : [];
          return { user, roles: [...roles, 'ROLE_AUTHENTICATED'] };
        }
      } else if (filter === 'basic') {
        const auth = header('authorization');
        if (auth?.startsWith('Basic ')) {
          const [user, password] = Buffer.from(auth.slice(6), 'base64').toString('utf8').split(':');
          if (user === this.options.admin.user && password === this.options.admin.password) return { user, roles: ['ROLE_ADMINISTRATOR', 'ROLE_AUTHENTICATED'] };
          throw new WfsError(401, 'bad credentials');
        }
      }
    }
    return { user: null, roles: [] };
  }

  /** Answers an OGC request under /geoserver (the path without the context): a WFS-T Transaction (POST) or a KVP read (GET). */
  async handle(
    path: string,
    method: string,
    headers: Record<string, string | string[] | undefined>,
    body: string,
    ctx: WfsContext,
    query: URLSearchParams = new URLSearchParams(),
  ): Promise<WfsAnswer> {
    const principal = this.authenticate(path, headers);
    const allowed = (rule: string | undefined) => rule !== undefined && (rule.split(',').map((r) => r.trim()).includes('*') || principal.roles.some((r) => rule.split(',').map((x) => x.trim()).includes(r)));
    if (method === 'GET') {
      const read = /^\/(?:([A-Za-z_][\w-]*)\/)?(wfs|wms|ows)$/.exec(path);
      if (!read) return { status: 501, type: 'text/plain', body: `fake GeoServer does not implement ${method} ${path}` };
      return this.read(read[1], read[2]!, query, principal, allowed, ctx);
    }
    const service = /^\/(?:([A-Za-z_][\w-]*)\/)?(wfs|ows)$/.exec(path);
    if (!service) return { status: 501, type: 'text/plain', body: `fake GeoServer does not implement ${method} ${path}` };
    if (method !== 'POST' || !/<(\w+:)?Transaction\b/.test(body)) return { status: 501, type: 'text/plain', body: 'fake GeoServer implements only WFS-T Transaction (POST) and KVP GetFeature/GetMap (GET)' };
    const inserts = [...body.matchAll(/<(?:\w+:)?Insert\b[^>]*>([\s\S]*?)<\/(?:\w+:)?Insert>/g)].map((m) => m[1]!);
    const features = inserts.flatMap((insert) => [...insert.matchAll(/<(\w+):(\w+)>([\s\S]*?)<\/\1:\2>/g)].map((m) => ({ prefix: m[1]!, workspace: service[1] ?? m[1]!, layer: m[2]!, content: m[3]! })));
    if (features.length === 0) return { status: 400, type: 'text/plain', body: 'a Transaction without an Insert this fake understands' };
    for (const f of features) {
      if (!allowed(ctx.serviceRules['wfs.Transaction']) || !allowed(ctx.layerRules[`${f.workspace}.${f.layer}.w`] ?? ctx.layerRules['*.*.w'])) {
        if (principal.user === null) return { status: 401, type: 'text/plain', body: 'authentication required', headers: { 'WWW-Authenticate': 'Basic realm="GeoServer Realm"' } };
        return { status: 403, type: 'text/plain', body: `${principal.user} may not write ${f.workspace}:${f.layer}` };
      }
    }
    const ids: string[] = [];
    for (const f of features) ids.push(await this.insert(f, principal, ctx));
    const refs = ids.map((id) => `<ogc:FeatureId fid="${features[0]!.layer}.${id}"/>`).join('');
    return {
      status: 200,
      type: 'text/xml',
      body: `<wfs:TransactionResponse xmlns:wfs="http://www.opengis.net/wfs" xmlns:ogc="http://www.opengis.net/ogc" version="1.1.0"><wfs:TransactionSummary><wfs:totalInserted>${ids.length}</wfs:totalInserted><wfs:totalUpdated>0</wfs:totalUpdated><wfs:totalDeleted>0</wfs:totalDeleted></wfs:TransactionSummary><wfs:InsertResults><wfs:Feature>${refs}</wfs:Feature></wfs:InsertResults></wfs:TransactionResponse>`,
    };
  }

  /** GeoTools' SessionCommandsListener: validate the SQL, substitute ${NAME,default}, check each value. */
  sessionCommand(sql: string | undefined, kind: 'startup' | 'closeup', gsUser: string | null): string | undefined {
    if (!sql?.trim()) return undefined;
    const unrestricted = this.properties['org.geotools.jdbc.unrestrictedSessionSql'] === 'true';
    if (!unrestricted) {
      const allowed =
        kind === 'startup'
          ? (this.properties['org.geotools.jdbc.allowedSessionStartupSql'] ?? '(?i)^SET SESSION AUTHORIZATION \\$\\{GSUSER(,[a-z_][a-z0-9_]{0,62})?\\}$')
          : (this.properties['org.geotools.jdbc.allowedSessionCloseupSql'] ?? '(?i)^RESET SESSION AUTHORIZATION$');
      if (!javaMatches(allowed, sql.trim())) throw new WfsError(500, `Session ${kind === 'startup' ? 'startup' : 'close-up'} SQL does not match allowed pattern`);
    }
    const values = this.properties['org.geotools.jdbc.allowedSessionVariableValues'] ?? '(?i)^[a-z_][a-z0-9_$]{0,62}$';
    return sql.trim().replace(/\$\{([^,}]+)(?:,([^}]*))?\}/g, (_, name: string, fallback: string | undefined) => {
      const value = name === 'GSUSER' ? (gsUser ?? fallback) : fallback;
      if (value === undefined) return '';
      if (!unrestricted && !javaMatches(values, value)) throw new WfsError(500, `Environment variable value '${value}' does not match allowed pattern`);
      return value;
    });
  }

  /**
   * A connection of the store as GeoServer takes one from its pool: as the store's user, with the
   * session startup SQL for this principal; `done` runs the close-up SQL and ends it.
   */
  private async storeConnection(store: WfsStore, principal: WfsPrincipal): Promise<{ client: pg.Client; done: () => Promise<void> }> {
    const { params, password } = store;
    const target = this.options.resolveDatabase?.(params.host!, Number(params.port)) ?? { host: params.host!, port: Number(params.port) };
    const client = new pg.Client({ host: target.host, port: target.port, database: params.database, user: params.user, password });
    await client.connect();
    try {
      const startup = this.sessionCommand(params['Session startup SQL'], 'startup', principal.user);
      if (startup) {
        this.sessionSql.push(startup);
        await client.query(startup);
      }
    } catch (error) {
      await client.end();
      throw error;
    }
    return {
      client,
      done: async () => {
        try {
          const closeup = this.sessionCommand(params['Session close-up SQL'], 'closeup', principal.user);
          if (closeup) {
            this.sessionSql.push(closeup);
            await client.query(closeup);
          }
        } finally {
          await client.end();
        }
      },
    };
  }

  /** KVP reads: WFS GetFeature (GeoJSON) and WMS GetMap (SVG), each layer checked against its read rule. */
  private async read(
    workspace: string | undefined,
    endpoint: string,
    query: URLSearchParams,
    principal: WfsPrincipal,
    allowed: (rule: string | undefined) => boolean,
    ctx: WfsContext,
  ): Promise<WfsAnswer> {
    // OGC KVP parameter names are case-insensitive; values are not.
    const kvp = new Map([...query.entries()].map(([k, v]) => [k.toLowerCase(), v]));
    const service = (kvp.get('service') ?? (endpoint === 'ows' ? '' : endpoint)).toUpperCase();
    const request = (kvp.get('request') ?? '').toLowerCase();
    const version = kvp.get('version') ?? (service === 'WMS' ? '1.3.0' : '2.0.0');
    const names = (service === 'WMS' ? kvp.get('layers') : (kvp.get('typenames') ?? kvp.get('typename'))) ?? '';
    const operation = service === 'WMS' && request === 'getmap' ? 'GetMap' : service === 'WFS' && request === 'getfeature' ? 'GetFeature' : undefined;
    if (!operation) return { status: 501, type: 'text/plain', body: `fake GeoServer reads only WFS GetFeature and WMS GetMap, not ${service || '?'} ${kvp.get('request') ?? '?'}` };
    const serviceRule = ctx.serviceRules[`${service.toLowerCase()}.${operation}`] ?? ctx.serviceRules[`${service.toLowerCase()}.*`] ?? ctx.serviceRules['*.*'];
    if (!allowed(serviceRule)) {
      if (principal.user === null) return { status: 401, type: 'text/plain', body: 'authentication required', headers: { 'WWW-Authenticate': 'Basic realm="GeoServer Realm"' } };
      return { status: 403, type: 'text/plain', body: `${principal.user} may not use ${service} ${operation}` };
    }
    const layers: { workspace: string; layer: string; nativeName: string; store: WfsStore }[] = [];
    for (const name of names.split(',').map((n) => n.trim()).filter(Boolean).slice(0, 20)) {
      const [ws, layer] = name.includes(':') ? (name.split(':', 2) as [string, string]) : [workspace ?? '', name];
      const found = ctx.storeOf(ws);
      const nativeName = found?.nativeNames.get(layer);
      const rule = ctx.layerRules[`${ws}.${layer}.r`] ?? ctx.layerRules[`${ws}.*.r`] ?? ctx.layerRules['*.*.r'];
      // A layer the caller may not read does not exist for it (catalog mode HIDE).
      if (!found || !nativeName || !allowed(rule) || (workspace && ws !== workspace)) {
        return service === 'WMS'
          ? { status: 200, type: 'text/xml', body: serviceException('LayerNotDefined', `Could not find layer ${name}`) }
          : { status: 400, type: 'text/xml', body: owsException('InvalidParameterValue', `Feature type ${name} unknown`) };
      }
      layers.push({ workspace: ws, layer, nativeName, store: found.store });
    }
    if (layers.length === 0) return { status: 400, type: 'text/xml', body: owsException('MissingParameterValue', `${service === 'WMS' ? 'LAYERS' : 'typeNames'} is required`) };
    return operation === 'GetFeature' ? this.getFeature(layers, kvp, version, principal) : this.getMap(layers, kvp, version, principal);
  }

  /** The geometry column of a table or view, as GeoServer's PostGIS store finds it (geometry_columns). */
  private async geometryColumn(client: pg.Client, schema: string, table: string): Promise<string> {
    const { rows } = await client.query<{ column: string }>('SELECT f_geometry_column AS "column" FROM geometry_columns WHERE f_table_schema = $1 AND f_table_name = $2 LIMIT 1', [schema, table]);
    if (!rows[0]) throw new WfsError(500, `no geometry column in ${schema}.${table}`);
    return rows[0].column;
  }

  private async getFeature(layers: { layer: string; nativeName: string; store: WfsStore }[], kvp: Map<string, string>, version: string, principal: WfsPrincipal): Promise<WfsAnswer> {
    const format = (kvp.get('outputformat') ?? '').toLowerCase();
    if (!['application/json', 'json', 'application/geo+json'].includes(format)) return { status: 501, type: 'text/plain', body: 'this GeoServer double answers GetFeature only with outputFormat=application/json' };
    const limit = Math.min(Number(kvp.get('count') ?? kvp.get('maxfeatures') ?? 10_000) || 10_000, 10_000);
    const box = parseBox(kvp.get('bbox'), version, 'WFS');
    const features: unknown[] = [];
    let matched = 0;
    for (const { layer, nativeName, store } of layers) {
      const schema = store.params.schema ?? 'public';
      const { client, done } = await this.storeConnection(store, principal);
      try {
        const column = await this.geometryColumn(client, schema, nativeName);
        const geom = pg.escapeIdentifier(column);
        const where = box ? `WHERE t.${geom} && ST_MakeEnvelope($2, $3, $4, $5, 4326)` : '';
        const { rows } = await client.query<{ properties: Record<string, unknown>; geometry: unknown; matched: string }>(
          `SELECT to_jsonb(t) - $1::text AS properties, ST_AsGeoJSON(t.${geom}, 7)::jsonb AS geometry, count(*) OVER () AS matched
             FROM ${pg.escapeIdentifier(schema)}.${pg.escapeIdentifier(nativeName)} t ${where} LIMIT ${limit}`,
          [column, ...(box ?? [])],
        );
        matched += Number(rows[0]?.matched ?? 0);
        rows.forEach((row, i) => features.push({ type: 'Feature', id: `${layer}.${String(row.properties.id ?? i + 1)}`, geometry: row.geometry, properties: row.properties }));
      } catch (error) {
        if (error instanceof WfsError) throw error;
        throw new WfsError(500, `ows:ExceptionReport ${(error as Error).message}`);
      } finally {
        await done();
      }
    }
    const collection = { type: 'FeatureCollection', features, totalFeatures: matched, numberMatched: matched, numberReturned: features.length, timeStamp: new Date().toISOString(), crs: { type: 'name', properties: { name: 'urn:ogc:def:crs:EPSG::4326' } } };
    return { status: 200, type: 'application/json', body: JSON.stringify(collection) };
  }

  private async getMap(layers: { layer: string; nativeName: string; store: WfsStore }[], kvp: Map<string, string>, version: string, principal: WfsPrincipal): Promise<WfsAnswer> {
    const format = (kvp.get('format') ?? '').toLowerCase();
    if (format !== 'image/svg+xml' && format !== 'image/svg') return { status: 501, type: 'text/plain', body: 'this GeoServer double draws GetMap only as image/svg+xml' };
    const width = Number(kvp.get('width'));
    const height = Number(kvp.get('height'));
    const box = parseBox(kvp.get('bbox'), version, 'WMS', kvp.get('crs') ?? kvp.get('srs'));
    if (!box || !(width > 0 && width <= 4096 && height > 0 && height <= 4096)) return { status: 200, type: 'text/xml', body: serviceException('MissingDimensionValue', 'BBOX, WIDTH and HEIGHT (1..4096) are required') };
    const [minx, miny, maxx, maxy] = box;
    const groups: string[] = [];
    for (const { layer, nativeName, store } of layers) {
      const schema = store.params.schema ?? 'public';
      const { client, done } = await this.storeConnection(store, principal);
      try {
        const geom = pg.escapeIdentifier(await this.geometryColumn(client, schema, nativeName));
        // ST_AsSVG writes y as -latitude: the viewBox below flips the box the same way.
        const { rows } = await client.query<{ kind: string; svg: string }>(
          `SELECT GeometryType(t.${geom}) AS kind, ST_AsSVG(t.${geom}, 0, 7) AS svg
             FROM ${pg.escapeIdentifier(schema)}.${pg.escapeIdentifier(nativeName)} t WHERE t.${geom} && ST_MakeEnvelope($1, $2, $3, $4, 4326) LIMIT 100000`,
          box,
        );
        const radius = ((maxx - minx) / width) * 3;
        const shapes = rows.flatMap((row) =>
          /POINT$/.test(row.kind) ? row.svg.split(',').map((point) => `<circle ${point} r="${radius}"/>`) : [`<path d="${row.svg}"${/LINE/.test(row.kind) ? ' fill="none"' : ''}/>`],
        );
        groups.push(`<g id="${layer}" data-features="${rows.length}">${shapes.join('')}</g>`);
      } catch (error) {
        if (error instanceof WfsError) throw error;
        throw new WfsError(500, `ServiceException ${(error as Error).message}`);
      } finally {
        await done();
      }
    }
    const svg = `<?xml version="1.0" encoding="UTF-8"?><svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="${minx} ${-maxy} ${maxx - minx} ${maxy - miny}" preserveAspectRatio="none">${groups.join('')}</svg>`;
    return { status: 200, type: 'image/svg+xml', body: svg };
  }

  private async insert(f: { prefix: string; workspace: string; layer: string; content: string }, principal: WfsPrincipal, ctx: WfsContext): Promise<string> {
    const found = ctx.storeOf(f.workspace);
    const nativeName = found?.nativeNames.get(f.layer);
    if (!found || !nativeName) throw new WfsError(400, `unknown feature type ${f.workspace}:${f.layer}`);
    const { params } = found.store;
    const { client, done } = await this.storeConnection(found.store, principal);
    try {
      const properties = Object.fromEntries([...f.content.matchAll(new RegExp(`<${f.prefix}:(\\w+)>([^<]*)</${f.prefix}:\\1>`, 'g'))].map((m) => [m[1]!, m[2]!]));
      const pos = /<gml:pos>\s*([-\d.eE]+)\s+([-\d.eE]+)\s*<\/gml:pos>/.exec(f.content);
      if (!pos) throw new WfsError(400, 'only gml:Point geometries with gml:pos are understood by this fake');
      const columns = Object.keys(properties).filter((c) => /^[a-z_][a-z0-9_]*$/.test(c));
      const values = columns.map((c) => properties[c]);
      const placeholders = columns.map((_, i) => `$${i + 1}`);
      const schema = params.schema ?? 'public';
      const sql = `INSERT INTO ${pg.escapeIdentifier(schema)}.${pg.escapeIdentifier(nativeName)} (${[...columns.map((c) => pg.escapeIdentifier(c)), 'geom'].join(', ')})
        VALUES (${[...placeholders, `ST_SetSRID(ST_MakePoint($${columns.length + 1}::float8, $${columns.length + 2}::float8), 4326)`].join(', ')}) RETURNING id`;
      await client.query('BEGIN');
      const { rows } = await client.query<{ id: string }>(sql, [...values, Number(pos[1]), Number(pos[2])]);
      await client.query('COMMIT');
      return rows[0]!.id;
    } catch (error) {
      await client.query('ROLLBACK').catch(() => undefined);
      if (error instanceof WfsError) throw error;
      throw new WfsError(500, `ows:ExceptionReport ${(error as Error).message}`);
    } finally {
      await done();
    }
  }
}

export interface WfsAnswer {
  status: number;
  type: string;
  body: string;
  headers?: Record<string, string>;
}

const xmlText = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
const owsException = (code: string, text: string) =>
  `<?xml version="1.0" encoding="UTF-8"?><ows:ExceptionReport xmlns:ows="http://www.opengis.net/ows/1.1" version="2.0.0"><ows:Exception exceptionCode="${code}"><ows:ExceptionText>${xmlText(text)}</ows:ExceptionText></ows:Exception></ows:ExceptionReport>`;
const serviceException = (code: string, text: string) =>
  `<?xml version="1.0" encoding="UTF-8"?><ServiceExceptionReport version="1.3.0" xmlns="http://www.opengis.net/ogc"><ServiceException code="${code}">${xmlText(text)}</ServiceException></ServiceExceptionReport>`;

/**
 * A BBOX as [minLon, minLat, maxLon, maxLat]. EPSG:4326 has latitude first in WMS 1.3.0 and in WFS
 * 1.1/2.0 (where a bbox without a CRS is in the layer's, EPSG:4326, urn axis order); WMS 1.1.1, CRS:84
 * and WFS 1.0 give longitude first. Undefined when absent or malformed.
 */
function parseBox(value: string | undefined, version: string, service: 'WMS' | 'WFS', crsParam?: string): [number, number, number, number] | undefined {
  if (!value) return undefined;
  const parts = value.split(',');
  const numbers = parts.slice(0, 4).map(Number);
  if (numbers.length !== 4 || numbers.some((n) => !Number.isFinite(n))) return undefined;
  const crs = (service === 'WFS' ? parts[4] : crsParam) ?? '';
  const latFirst =
    /CRS:84$/i.test(crs) ? false
    : service === 'WMS' ? version.startsWith('1.3') && /EPSG:?:?4326$/i.test(crs)
    : !version.startsWith('1.0') && (crs === '' || /^urn:/i.test(crs));
  const [a, b, c, d] = numbers as [number, number, number, number];
  return latFirst ? [b, a, d, c] : [a, b, c, d];
}

export class WfsError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}
