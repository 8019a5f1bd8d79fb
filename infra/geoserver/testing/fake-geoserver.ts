import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { closeGracefully, listen } from '../../../services/shared/http-server.js';
import type { ProvisionOptions } from '../provision.js';
import { FakeWfs, WfsError, type WfsContext, type WfsOptions } from './fake-wfs.js';
import { REST_BASE, RestSpec, SpecViolation, type MatchedOperation } from './rest-spec.js';

/**
 * A stateful stand-in for GeoServer's REST API, for tests: it answers like GeoServer (JSON shapes of
 * the spec's examples, 404 for what does not exist, 409 for duplicates) and refuses, with 400, every
 * request the vendored REST specification does not allow (RestSpec). Violations are kept so a test
 * can assert there were none.
 */

export interface RecordedRequest {
  method: string;
  path: string;
  query: string;
  status: number;
}

type Params = Record<string, string>;
type Versions = string[];

export interface FakeGeoServerState {
  workspaces: Set<string>;
  datastores: Map<string, { name: string; description?: string; enabled: boolean; params: Params; password: string }>;
  featureTypes: Map<string, { name: string; nativeName: string; title: string; srs: string }>;
  layers: Map<string, { defaultStyle: string; styles: string[] }>;
  styles: Map<string, string>;
  wfs: { enabled: boolean; serviceLevel: string; maxFeatures: number };
  wms: { enabled: boolean; versions: Versions };
  layerRules: Record<string, string>;
  serviceRules: Record<string, string>;
}

export interface FakeGeoServer {
  url: string;
  state: FakeGeoServerState;
  requests: RecordedRequest[];
  violations: string[];
  /** The WFS-T side (with the `wfs` option): security from the data directory, the store's session SQL. */
  wfs?: FakeWfs;
  /** Answer 503 to the next n requests (GeoServer still starting). */
  unavailableFor(n: number): void;
  close(): Promise<void>;
}

export function initialState(): FakeGeoServerState {
  return {
    workspaces: new Set(),
    datastores: new Map(),
    featureTypes: new Map(),
    layers: new Map(),
    styles: new Map(),
    wfs: { enabled: true, serviceLevel: 'COMPLETE', maxFeatures: 1_000_000 },
    wms: { enabled: true, versions: ['1.1.1', '1.3.0'] },
    // GeoServer's defaults (security/layers.properties, services.properties).
    layerRules: { '*.*.r': '*', '*.*.w': 'GROUP_ADMIN,ADMIN' },
    serviceRules: { '*.*': '*' },
  };
}

/**
 * What the provisioning tests ask of the fake: the stack's workspace, store and layer names, a database
 * the fake only records (it never connects), and readiness polled every 20 ms for up to 5 s.
 */
export function provisionOptions(overrides: Partial<ProvisionOptions> = {}): ProvisionOptions {
  return {
    workspace: 'geodata',
    namespaceUri: 'https://geo.example.org/features',
    datastore: 'features-db',
    database: { host: 'features-db', port: 5432, name: 'features', schema: 'features', user: 'geoserver', password: 'db-password-1' },
    layer: 'features',
    publicLayer: 'public_features',
    geometryProperty: 'geom',
    title: 'Features',
    readRoles: '*',
    writeRoles: 'ROLE_AUTHENTICATED',
    readyPollMs: 20,
    readyTimeoutMs: 5_000,
    ...overrides,
  };
}

class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

const json = (value: unknown) => ({ type: 'application/json', body: JSON.stringify(value) });
const asList = <T>(value: T | T[] | undefined): T[] => (value === undefined ? [] : Array.isArray(value) ? value : [value]);

/** GeoServer re-encodes an uploaded SLD; the fake mimics that by normalising layout and dropping comments. */
function reencode(sld: string): string {
  return sld.replace(/<!--[\s\S]*?-->/g, '').replace(/>\s+</g, '><').trim();
}

export async function startFakeGeoServer(options: { user: string; password: string; state?: FakeGeoServerState; wfs?: Omit<WfsOptions, 'admin'> }): Promise<FakeGeoServer> {
  const spec = new RestSpec();
  const state = options.state ?? initialState();
  const wfs = options.wfs ? new FakeWfs({ ...options.wfs, admin: { user: options.user, password: options.password } }) : undefined;
  const wfsContext: WfsContext = {
    layerRules: state.layerRules,
    serviceRules: state.serviceRules,
    storeOf: (workspace) => {
      const entry = [...state.datastores.entries()].find(([key]) => key.startsWith(`${workspace}/`));
      if (!entry) return undefined;
      const nativeNames = new Map<string, string>();
      for (const [key, ft] of state.featureTypes) if (key.startsWith(`${entry[0]}/`)) nativeNames.set(ft.name, ft.nativeName);
      return { store: entry[1], nativeNames };
    },
  };
  const requests: RecordedRequest[] = [];
  const violations: string[] = [];
  let unavailable = 0;
  const expectedAuth = `Basic ${Buffer.from(`${options.user}:${options.password}`).toString('base64')}`;

  const handle = (op: MatchedOperation, body: string, accept: string, query: URLSearchParams): { status: number; type?: string; body?: string } => {
    const p = op.pathParams;
    const route = `${op.method} ${op.template}`;
    const parsed = () => JSON.parse(body) as Record<string, unknown>;
    switch (route) {
      case 'GET /workspaces':
        return { status: 200, ...json({ workspaces: { workspace: [...state.workspaces].map((name) => ({ name })) } }) };
      case 'POST /workspaces': {
        const name = String((parsed().workspace as { name: string }).name);
        if (state.workspaces.has(name)) throw new HttpError(409, `workspace ${name} already exists`);
        state.workspaces.add(name);
        return { status: 201, type: 'text/plain', body: name };
      }
      case 'GET /workspaces/{workspaceName}': {
        if (!state.workspaces.has(p.workspaceName as string)) throw new HttpError(404, 'no such workspace');
        return { status: 200, ...json({ workspace: { name: p.workspaceName } }) };
      }
      case 'POST /workspaces/{workspaceName}/datastores': {
        if (!state.workspaces.has(p.workspaceName as string)) throw new HttpError(404, 'no such workspace');
        const store = parsed().dataStore as { name: string; description?: string; enabled?: boolean; connectionParameters: { entry: { '@key': string; $: string }[] } };
        const key = `${p.workspaceName}/${store.name}`;
        if (state.datastores.has(key)) throw new HttpError(409, 'datastore exists');
        state.datastores.set(key, toStore(store));
        return { status: 201, type: 'text/plain', body: store.name };
      }
      case 'GET /workspaces/{workspaceName}/datastores/{storeName}': {
        const store = state.datastores.get(`${p.workspaceName}/${p.storeName}`);
        if (!store) throw new HttpError(404, 'no such datastore');
        const entry = [...Object.entries(store.params), ['passwd', `crypt1:${Buffer.from(store.password).toString('base64')}`]].map(([k, v]) => ({ '@key': k, $: v }));
        return { status: 200, ...json({ dataStore: { name: store.name, description: store.description, enabled: store.enabled, workspace: { name: p.workspaceName }, connectionParameters: { entry }, _default: false } }) };
      }
      case 'PUT /workspaces/{workspaceName}/datastores/{storeName}': {
        const key = `${p.workspaceName}/${p.storeName}`;
        if (!state.datastores.has(key)) throw new HttpError(404, 'no such datastore');
        state.datastores.set(key, toStore(parsed().dataStore as never));
        return { status: 200 };
      }
      case 'POST /workspaces/{workspaceName}/datastores/{storeName}/featuretypes': {
        if (!state.datastores.has(`${p.workspaceName}/${p.storeName}`)) throw new HttpError(404, 'no such datastore');
        const ft = parsed().featureType as { name: string; nativeName: string; title: string; srs: string };
        const key = `${p.workspaceName}/${p.storeName}/${ft.name}`;
        if (state.featureTypes.has(key)) throw new HttpError(409, 'feature type exists');
        state.featureTypes.set(key, { name: ft.name, nativeName: ft.nativeName, title: ft.title, srs: ft.srs });
        // Like GeoServer: publishing a feature type creates its layer with a generic default style.
        state.layers.set(`${p.workspaceName}:${ft.name}`, { defaultStyle: 'generic', styles: [] });
        return { status: 201, type: 'text/plain', body: ft.name };
      }
      case 'GET /workspaces/{workspaceName}/datastores/{storeName}/featuretypes/{featureTypeName}': {
        const ft = state.featureTypes.get(`${p.workspaceName}/${p.storeName}/${p.featureTypeName}`);
        if (!ft) throw new HttpError(404, 'no such feature type');
        return { status: 200, ...json({ featureType: { ...ft, namespace: { name: p.workspaceName }, enabled: true } }) };
      }
      case 'PUT /workspaces/{workspaceName}/datastores/{storeName}/featuretypes/{featureTypeName}': {
        const key = `${p.workspaceName}/${p.storeName}/${p.featureTypeName}`;
        const ft = state.featureTypes.get(key);
        if (!ft) throw new HttpError(404, 'no such feature type');
        state.featureTypes.set(key, { ...ft, ...(parsed().featureType as object) });
        return { status: 200 };
      }
      case 'POST /workspaces/{workspace}/styles': {
        const name = query.get('name');
        if (!name) throw new HttpError(400, 'a style upload needs ?name=');
        const key = `${p.workspace}/${name}`;
        if (state.styles.has(key)) throw new HttpError(403, `style ${name} already exists`);
        state.styles.set(key, reencode(body));
        return { status: 201, type: 'text/plain', body: name };
      }
      case 'GET /workspaces/{workspace}/styles/{style}': {
        const sld = state.styles.get(`${p.workspace}/${p.style}`);
        if (sld === undefined) throw new HttpError(404, 'no such style');
        if (accept.includes('application/vnd.ogc.sld+xml')) return { status: 200, type: 'application/vnd.ogc.sld+xml', body: sld };
        return { status: 200, ...json({ style: { name: p.style, workspace: { name: p.workspace }, format: 'sld', filename: `${p.style}.sld` } }) };
      }
      case 'PUT /workspaces/{workspace}/styles/{style}': {
        const key = `${p.workspace}/${p.style}`;
        if (!state.styles.has(key)) throw new HttpError(404, 'no such style');
        state.styles.set(key, reencode(body));
        return { status: 200 };
      }
      case 'GET /layers/{layerName}': {
        const layer = state.layers.get(p.layerName as string);
        if (!layer) throw new HttpError(404, 'no such layer');
        const ref = (name: string) => ({ name, href: `http://localhost/geoserver/rest/styles/${name}.json` });
        const styles = layer.styles.length === 1 ? ref(layer.styles[0] as string) : layer.styles.map(ref); // XStream: one element is bare
        return { status: 200, ...json({ layer: { name: p.layerName, type: 'VECTOR', defaultStyle: ref(layer.defaultStyle), ...(layer.styles.length ? { styles: { '@class': 'linked-hash-set', style: styles } } : {}) } }) };
      }
      case 'PUT /layers/{layerName}': {
        const layer = state.layers.get(p.layerName as string);
        if (!layer) throw new HttpError(404, 'no such layer');
        const update = parsed().layer as { defaultStyle?: { name: string }; styles?: { style?: { name: string } | { name: string }[] } };
        const names = [update.defaultStyle?.name, ...asList(update.styles?.style).map((s) => s.name)].filter((n): n is string => !!n);
        for (const name of names) {
          if (!state.styles.has(name.replace(':', '/'))) throw new HttpError(400, `style ${name} does not exist`);
        }
        if (update.defaultStyle) layer.defaultStyle = update.defaultStyle.name;
        if (update.styles) layer.styles = asList(update.styles.style).map((s) => s.name);
        return { status: 200 };
      }
      case 'GET /services/wfs/settings':
        return { status: 200, ...json({ wfs: { ...state.wfs, name: 'WFS' } }) };
      case 'PUT /services/wfs/settings':
        Object.assign(state.wfs, parsed().wfs as object);
        return { status: 200 };
      case 'GET /services/wms/settings':
        return { status: 200, ...json({ wms: { enabled: state.wms.enabled, name: 'WMS', versions: { 'org.geotools.util.Version': state.wms.versions.map((version) => ({ version })) } } }) };
      case 'PUT /services/wms/settings': {
        const update = parsed().wms as { enabled?: boolean; versions?: { 'org.geotools.util.Version': { version: string }[] } };
        if (update.enabled !== undefined) state.wms.enabled = update.enabled;
        if (update.versions) state.wms.versions = asList(update.versions['org.geotools.util.Version']).map((v) => v.version);
        return { status: 200 };
      }
      case 'POST /reload':
      case 'PUT /reload':
        // Reloads the configuration from disk, the security configuration with it.
        wfs?.reload();
        return { status: 200 };
      case 'GET /security/acl/layers':
        return { status: 200, ...json(state.layerRules) };
      case 'GET /security/acl/services':
        return { status: 200, ...json(state.serviceRules) };
      case 'POST /security/acl/layers':
      case 'POST /security/acl/services': {
        const rules = route.endsWith('layers') ? state.layerRules : state.serviceRules;
        const added = parsed() as Record<string, string>;
        if (Object.keys(added).some((rule) => rule in rules)) throw new HttpError(409, 'rule exists; all additions aborted');
        Object.assign(rules, added);
        return { status: 200 };
      }
      case 'PUT /security/acl/layers':
      case 'PUT /security/acl/services': {
        const rules = route.endsWith('layers') ? state.layerRules : state.serviceRules;
        const changed = parsed() as Record<string, string>;
        if (Object.keys(changed).some((rule) => !(rule in rules))) throw new HttpError(409, 'rule missing; all modifications aborted');
        Object.assign(rules, changed);
        return { status: 200 };
      }
      default:
        // Documented, but this fake does not implement it: a test using it must extend the fake.
        throw new HttpError(501, `fake GeoServer does not implement ${route}`);
    }
  };

  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const url = new URL(req.url ?? '/', 'http://fake');
      const method = req.method ?? 'GET';
      const body = Buffer.concat(chunks).toString('utf8');
      const answer = (status: number, type = 'text/plain', text = '') => {
        requests.push({ method, path: url.pathname, query: url.search, status });
        res.writeHead(status, { 'content-type': type });
        res.end(text);
      };
      if (unavailable > 0) {
        unavailable--;
        return answer(503, 'text/plain', 'starting');
      }
      if (wfs && url.pathname.startsWith('/geoserver/') && !url.pathname.startsWith(`${REST_BASE}/`)) {
        wfs.handle(url.pathname.slice('/geoserver'.length), method, req.headers, body, wfsContext, url.searchParams).then(
          (result) => {
            requests.push({ method, path: url.pathname, query: url.search, status: result.status });
            res.writeHead(result.status, { 'content-type': result.type, ...(result.headers ?? {}) });
            res.end(result.body);
          },
          (error: unknown) => answer(error instanceof WfsError ? error.status : 500, 'text/plain', (error as Error).message),
        );
        return;
      }
      if (req.headers.authorization !== expectedAuth) return answer(401, 'text/plain', 'HTTP Basic authentication required');
      if (!url.pathname.startsWith(`${REST_BASE}/`)) {
        violations.push(`${method} ${url.pathname}: outside ${REST_BASE}`);
        return answer(404);
      }
      const restPath = url.pathname.slice(REST_BASE.length);
      try {
        const op = spec.check({ method, path: restPath, query: url.searchParams, contentType: req.headers['content-type'], body });
        const result = handle(op, body, String(req.headers.accept ?? ''), url.searchParams);
        return answer(result.status, result.type, result.body);
      } catch (error) {
        if (error instanceof SpecViolation) {
          violations.push(error.message);
          return answer(400, 'text/plain', error.message);
        }
        if (error instanceof HttpError) return answer(error.status, 'text/plain', error.message);
        return answer(500, 'text/plain', (error as Error).message);
      }
    });
  });
  const port = await listen(server, 0, '127.0.0.1');
  return {
    url: `http://127.0.0.1:${port}/geoserver`,
    state,
    requests,
    violations,
    ...(wfs ? { wfs } : {}),
    unavailableFor: (n) => {
      unavailable = n;
    },
    close: () => closeGracefully(server, 1000),
  };
}

function toStore(store: { name: string; description?: string; enabled?: boolean | string; connectionParameters: { entry: { '@key': string; $: string }[] } }) {
  const entries = asList(store.connectionParameters.entry);
  const params = Object.fromEntries(entries.filter((e) => e['@key'] !== 'passwd').map((e) => [e['@key'], e.$]));
  const password = entries.find((e) => e['@key'] === 'passwd')?.$ ?? '';
  return { name: store.name, description: store.description, enabled: String(store.enabled ?? true) === 'true', params, password };
}
