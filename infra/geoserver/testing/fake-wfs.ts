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

  /** Handles a WFS request under /geoserver (path without the context), or answers undefined when it is not one. */
  async handle(path: string, method: string, headers: Record<string, string | string[] | undefined>, body: string, ctx: WfsContext): Promise<{ status: number; type: string; body: string; headers?: Record<string, string> }> {
    const principal = this.authenticate(path, headers);
    const service = /^\/(?:([A-Za-z_][\w-]*)\/)?(wfs|ows)$/.exec(path);
    if (!service) return { status: 501, type: 'text/plain', body: `fake GeoServer does not implement ${method} ${path}` };
    if (method !== 'POST' || !/<(\w+:)?Transaction\b/.test(body)) return { status: 501, type: 'text/plain', body: 'fake GeoServer implements only WFS-T Transaction (POST)' };
    const allowed = (rule: string | undefined) => rule !== undefined && (rule.split(',').map((r) => r.trim()).includes('*') || principal.roles.some((r) => rule.split(',').map((x) => x.trim()).includes(r)));
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

  private async insert(f: { prefix: string; workspace: string; layer: string; content: string }, principal: WfsPrincipal, ctx: WfsContext): Promise<string> {
    const found = ctx.storeOf(f.workspace);
    const nativeName = found?.nativeNames.get(f.layer);
    if (!found || !nativeName) throw new WfsError(400, `unknown feature type ${f.workspace}:${f.layer}`);
    const { params, password } = found.store;
    const target = this.options.resolveDatabase?.(params.host!, Number(params.port)) ?? { host: params.host!, port: Number(params.port) };
    const client = new pg.Client({ host: target.host, port: target.port, database: params.database, user: params.user, password });
    await client.connect();
    try {
      const startup = this.sessionCommand(params['Session startup SQL'], 'startup', principal.user);
      if (startup) {
        this.sessionSql.push(startup);
        await client.query(startup);
      }
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
      const closeup = this.sessionCommand(params['Session close-up SQL'], 'closeup', principal.user);
      if (closeup) {
        this.sessionSql.push(closeup);
        await client.query(closeup);
      }
      return rows[0]!.id;
    } catch (error) {
      await client.query('ROLLBACK').catch(() => undefined);
      if (error instanceof WfsError) throw error;
      throw new WfsError(500, `ows:ExceptionReport ${(error as Error).message}`);
    } finally {
      await client.end();
    }
  }
}

export class WfsError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}
