/**
 * A local OpenStreetMap API 0.6 server for tests: real HTTP on 127.0.0.1:0, speaking the subset the
 * exporter uses, and as strict as the real one where it matters:
 *
 * - PUT  /api/0.6/changeset/create            (OAuth2 bearer; <osm><changeset><tag/>…)
 * - GET  /api/0.6/changeset/:id               (open="true|false")
 * - POST /api/0.6/changeset/:id/upload        (osmChange → diffResult; atomic; 409 on stale versions)
 * - PUT  /api/0.6/changeset/:id/close
 * - PUT  /api/0.6/changeset/:id               (new tags of an open changeset)
 * - GET  /api/0.6/user/details                (the token's user: id, display_name)
 * - GET  /api/0.6/changeset/:id/download      (osmChange of what the changeset did)
 * - GET  /api/0.6/node/:id, /way/:id[/full], /relation/:id[/full], /:type/:id/:version (history)
 * - GET  /api/0.6/map?bbox=left,bottom,right,top  (every node in the box, the ways using them with all
 *   their nodes, the relations using any of those; 400 for a malformed box or one over 0.25 square
 *   degrees, as https://wiki.openstreetmap.org/wiki/API_v0.6#Retrieving_map_data_by_bounding_box:_GET_/api/0.6/map)
 *
 * `seed(osmXml)` loads an OSM XML extract (positive ids kept) as what the community already mapped.
 *
 * Every upload is parsed in document order (its own parser, independent of the exporter's) and
 * checked: block names, changeset attribute, placeholder ids and references, versions, visibility,
 * "still used" on delete (with if-unused), that the changeset is open and owned by the caller, way
 * node limits, tag uniqueness. Error texts follow the real server's so tests read naturally.
 * Faults can be injected to simulate a server that is down or a connection dropped after the
 * server applied the request (the "crash after the remote side accepted" case).
 */
import { createServer, type IncomingMessage } from 'node:http';
import { XMLParser, XMLValidator } from 'fast-xml-parser';
import { closeGracefully, listen } from '../http-server.js';

export type ElementType = 'node' | 'way' | 'relation';

export interface StoredElement {
  type: ElementType;
  id: number;
  version: number;
  changeset: number;
  visible: boolean;
  tags: Record<string, string>;
  lat?: number;
  lon?: number;
  nodes?: number[];
  members?: { type: ElementType; ref: number; role: string }[];
}

interface Changeset {
  id: number;
  uid: number;
  user: string;
  open: boolean;
  tags: Record<string, string>;
  createdAt: string;
  closedAt?: string;
  /** What the changeset did, in order, with the resulting element versions. */
  changes: { action: 'create' | 'modify' | 'delete'; element: StoredElement }[];
}

export interface OsmUser {
  uid: number;
  displayName: string;
}

export interface Fault {
  method: string;
  path: RegExp;
  /** Headers of a `status` answer, e.g. { 'retry-after': '3600' } with 429. */
  headers?: Record<string, string>;
  /**
   * `status`: answer with `status` without processing. `drop-after-processing`: apply, then cut the
   * connection. `hold-after-processing`: apply and never answer (the client is killed meanwhile).
   */
  mode: 'status' | 'drop-after-processing' | 'hold-after-processing';
  status?: number;
  /** How many matching requests the fault applies to (default 1). */
  times?: number;
}

export interface RecordedRequest {
  /** Date.now() when the request arrived. */
  at: number;
  method: string;
  path: string;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

const MAX_BODY_BYTES = 5 * 1024 * 1024;
/** The real server's limit of changes (created, modified, deleted elements) per changeset. */
export const MAX_CHANGESET_CHANGES = 10_000;
const MAX_WAY_NODES = 2000;
const key = (type: ElementType, id: number) => `${type}/${id}`;
const escapeXml = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
const capitalised = (t: ElementType) => t[0]!.toUpperCase() + t.slice(1);

const orderedParser = new XMLParser({ preserveOrder: true, ignoreAttributes: false, attributeNamePrefix: '', parseAttributeValue: false, parseTagValue: false });

type OrderedNode = Record<string, unknown> & { ':@'?: Record<string, string> };

function nameOf(node: OrderedNode): string {
  const name = Object.keys(node).find((k) => k !== ':@');
  if (!name) throw new HttpError(400, 'Cannot parse valid osmChange from xml string');
  return name;
}
const childrenOf = (node: OrderedNode): OrderedNode[] => (node[nameOf(node)] as OrderedNode[]).filter((c) => nameOf(c) !== '#text');
const attrsOf = (node: OrderedNode): Record<string, string> => node[':@'] ?? {};

function assertWellFormed(xml: string, what: string): void {
  const result = XMLValidator.validate(xml, { allowBooleanAttributes: false });
  if (result !== true) throw new HttpError(400, `Cannot parse valid ${what} from xml string: ${result.err.msg} (line ${result.err.line})`);
}

function parseInteger(value: string | undefined, what: string): number {
  if (value === undefined || !/^-?\d+$/.test(value)) throw new HttpError(400, `Cannot parse valid osmChange from xml string: ${what} "${value ?? ''}" is not an integer`);
  return Number(value);
}

function renderElement(e: StoredElement, extra = ''): string {
  const tags = Object.entries(e.tags).map(([k, v]) => `<tag k="${escapeXml(k)}" v="${escapeXml(v)}"/>`).join('');
  const common = `id="${e.id}" version="${e.version}" changeset="${e.changeset}" visible="${e.visible}"${extra}`;
  if (e.type === 'node') {
    const position = e.visible ? ` lat="${e.lat!.toFixed(7)}" lon="${e.lon!.toFixed(7)}"` : '';
    return `<node ${common}${position}>${tags}</node>`;
  }
  if (e.type === 'way') return `<way ${common}>${(e.nodes ?? []).map((n) => `<nd ref="${n}"/>`).join('')}${tags}</way>`;
  const members = (e.members ?? []).map((m) => `<member type="${m.type}" ref="${m.ref}" role="${escapeXml(m.role)}"/>`).join('');
  return `<relation ${common}>${members}${tags}</relation>`;
}

export interface OsmApiDouble {
  url: string;
  /** Bearer token → user; unknown tokens get 401. */
  readonly users: Map<string, OsmUser>;
  readonly requests: RecordedRequest[];
  /** Raw bodies of every upload the server accepted, in order. */
  readonly acceptedUploads: string[];
  injectFault(fault: Fault): void;
  /** The current version of an element (visible or deleted), or undefined. */
  element(type: ElementType, id: number): StoredElement | undefined;
  /** All visible elements of a type. */
  visible(type: ElementType): StoredElement[];
  changeset(id: number): Readonly<Changeset> | undefined;
  /** Every changeset, in the order they were opened. */
  changesets(): readonly Readonly<Changeset>[];
  /** Simulate another mapper editing an element: a new version in a changeset of someone else. */
  editAsSomeoneElse(type: ElementType, id: number, edit: (e: StoredElement) => void): StoredElement;
  /** Load an OSM XML document (<osm> with nodes, ways, relations) as existing data; returns the count. */
  seed(xml: string): number;
  /** Simulate the server's idle auto-close. */
  autoClose(changesetId: number): void;
  close(): Promise<void>;
}

export async function startOsmApiDouble(options: { users?: Record<string, OsmUser>; maxChangesetChanges?: number } = {}): Promise<OsmApiDouble> {
  const maxChanges = options.maxChangesetChanges ?? MAX_CHANGESET_CHANGES;
  /** Every version of every element (history calls): key → versions in order. */
  const history = new Map<string, StoredElement[]>();
  const remember = (e: StoredElement) => {
    const k = key(e.type, e.id);
    if (!history.has(k)) history.set(k, []);
    history.get(k)!.push(structuredClone(e));
  };
  const users = new Map(Object.entries(options.users ?? { 'test-token': { uid: 42, displayName: 'exporter' } }));
  let elements = new Map<string, StoredElement>();
  const changesets = new Map<number, Changeset>();
  const nextId: Record<ElementType | 'changeset', number> = { node: 1000, way: 500, relation: 100, changeset: 9000 };
  const requests: RecordedRequest[] = [];
  const acceptedUploads: string[] = [];
  const faults: (Fault & { remaining: number })[] = [];

  function authenticate(req: IncomingMessage): OsmUser {
    const header = req.headers.authorization ?? '';
    const match = /^Bearer (\S+)$/.exec(header);
    const user = match ? users.get(match[1]!) : undefined;
    if (!user) throw new HttpError(401, 'Couldn\'t authenticate you');
    return user;
  }

  function ownOpenChangeset(id: number, user: OsmUser): Changeset {
    const changeset = changesets.get(id);
    if (!changeset) throw new HttpError(404, `The changeset with the id ${id} was not found`);
    if (changeset.uid !== user.uid) throw new HttpError(409, "The user doesn't own that changeset");
    if (!changeset.open) throw new HttpError(409, `The changeset ${id} was closed at ${changeset.closedAt}`);
    return changeset;
  }

  function parseTags(children: OrderedNode[], owner: string): Record<string, string> {
    const tags: Record<string, string> = {};
    for (const child of children.filter((c) => nameOf(c) === 'tag')) {
      const { k, v } = attrsOf(child);
      if (k === undefined || v === undefined) throw new HttpError(400, `${owner}: tag without k or v`);
      if (k.length > 255 || v.length > 255) throw new HttpError(400, `${owner}: tag longer than 255 characters`);
      if (k in tags) throw new HttpError(400, `Element ${owner} has duplicate tags with key ${k}`);
      tags[k] = v;
    }
    return tags;
  }

  /** Apply one upload to a copy of the state; throws HttpError on the first problem, leaving the state untouched. */
  function applyUpload(xml: string, changeset: Changeset): { diff: string[]; working: Map<string, StoredElement>; changes: Changeset['changes'] } {
    assertWellFormed(xml, 'osmChange');
    let doc: OrderedNode[];
    try {
      doc = orderedParser.parse(xml) as OrderedNode[];
    } catch {
      throw new HttpError(400, 'Cannot parse valid osmChange from xml string');
    }
    const root = doc.find((n) => nameOf(n) === 'osmChange');
    if (!root) throw new HttpError(400, 'Cannot parse valid osmChange from xml string: no osmChange root');
    const working = new Map([...elements].map(([k, e]) => [k, structuredClone(e)]));
    const placeholders = new Map<string, number>();
    const diff: string[] = [];
    const changes: Changeset['changes'] = [];

    const resolve = (type: ElementType, ref: number, owner: string): number => {
      if (ref < 0) {
        const real = placeholders.get(key(type, ref));
        if (real === undefined) throw new HttpError(400, `Placeholder ${type} not found for reference ${ref} in ${owner}`);
        return real;
      }
      const target = working.get(key(type, ref));
      if (!target || !target.visible) {
        throw new HttpError(412, `Precondition failed: ${owner} requires the ${type}s with id in (${ref}), which either do not exist, or are not visible.`);
      }
      return ref;
    };

    const usersOf = (type: ElementType, id: number): string[] => {
      const out: string[] = [];
      for (const e of working.values()) {
        if (!e.visible) continue;
        if (type === 'node' && e.type === 'way' && e.nodes!.includes(id)) out.push(`way ${e.id}`);
        if (e.type === 'relation' && e.members!.some((m) => m.type === type && m.ref === id)) out.push(`relation ${e.id}`);
      }
      return out;
    };

    for (const blockNode of childrenOf(root)) {
      const action = nameOf(blockNode);
      if (action !== 'create' && action !== 'modify' && action !== 'delete') throw new HttpError(400, `Unknown action ${action}, choices are create, modify, delete`);
      const ifUnused = action === 'delete' && 'if-unused' in attrsOf(blockNode);
      for (const elementNode of childrenOf(blockNode)) {
        const type = nameOf(elementNode) as ElementType;
        if (type !== 'node' && type !== 'way' && type !== 'relation') throw new HttpError(400, `Unknown element ${type}`);
        const attrs = attrsOf(elementNode);
        const id = parseInteger(attrs.id, `${type} id`);
        const owner = `${capitalised(type)} ${id}`;
        const changesetAttr = parseInteger(attrs.changeset, `${type} ${id} changeset`);
        if (changesetAttr !== changeset.id) throw new HttpError(409, `Changeset mismatch: Provided ${changesetAttr} but only ${changeset.id} is allowed`);
        const children = childrenOf(elementNode);
        const tags = parseTags(children, `${type}/${id}`);

        const content = (): Pick<StoredElement, 'lat' | 'lon' | 'nodes' | 'members'> => {
          if (type === 'node') {
            const lat = Number(attrs.lat);
            const lon = Number(attrs.lon);
            if (attrs.lat === undefined || attrs.lon === undefined || !Number.isFinite(lat) || !Number.isFinite(lon) || Math.abs(lat) > 90 || Math.abs(lon) > 180) {
              throw new HttpError(400, `The latitude/longitude of ${owner} are missing or outside the world`);
            }
            return { lat, lon };
          }
          if (type === 'way') {
            const refs = children.filter((c) => nameOf(c) === 'nd').map((c) => parseInteger(attrsOf(c).ref, 'nd ref'));
            if (refs.length === 0) throw new HttpError(412, `Precondition failed: Way ${id} must have at least one node`);
            if (refs.length > MAX_WAY_NODES) throw new HttpError(400, `You tried to add ${refs.length} nodes to way ${id}, however only ${MAX_WAY_NODES} are allowed`);
            return { nodes: refs.map((r) => resolve('node', r, owner)) };
          }
          const members = children
            .filter((c) => nameOf(c) === 'member')
            .map((c): { type: ElementType; ref: number; role: string } => {
              const m = attrsOf(c);
              if (m.type !== 'node' && m.type !== 'way' && m.type !== 'relation') throw new HttpError(400, `${owner}: member type ${String(m.type)} is invalid`);
              return { type: m.type, ref: resolve(m.type, parseInteger(m.ref, 'member ref'), owner), role: m.role ?? '' };
            });
          return { members };
        };

        if (action === 'create') {
          if (id >= 0) throw new HttpError(400, `${owner}: a created element needs a negative placeholder id`);
          if (placeholders.has(key(type, id))) throw new HttpError(400, `Placeholder IDs must be unique for created elements: ${type} ${id}`);
          const realId = nextId[type]++;
          const element: StoredElement = { type, id: realId, version: 1, changeset: changeset.id, visible: true, tags, ...content() };
          placeholders.set(key(type, id), realId);
          working.set(key(type, realId), element);
          changes.push({ action, element: structuredClone(element) });
          diff.push(`<${type} old_id="${id}" new_id="${realId}" new_version="1"/>`);
          continue;
        }

        const existing = working.get(key(type, id));
        if (!existing) throw new HttpError(404, `The ${type} with the id ${id} was not found`);
        const version = parseInteger(attrs.version, `${type} ${id} version`);
        if (!existing.visible) throw new HttpError(410, `The ${type} with the id ${id} has already been deleted`);
        if (version !== existing.version) throw new HttpError(409, `Version mismatch: Provided ${version}, server had: ${existing.version} of ${owner}`);

        if (action === 'modify') {
          const element: StoredElement = { type, id, version: existing.version + 1, changeset: changeset.id, visible: true, tags, ...content() };
          working.set(key(type, id), element);
          changes.push({ action, element: structuredClone(element) });
          diff.push(`<${type} old_id="${id}" new_id="${id}" new_version="${element.version}"/>`);
          continue;
        }

        const usedBy = usersOf(type, id);
        if (usedBy.length > 0) {
          if (ifUnused) {
            diff.push(`<${type} old_id="${id}" new_id="${id}" new_version="${existing.version}"/>`);
            continue;
          }
          throw new HttpError(412, `Precondition failed: ${owner} is still used by ${usedBy.join(', ')}.`);
        }
        const element: StoredElement = { type, id, version: existing.version + 1, changeset: changeset.id, visible: false, tags: {} };
        working.set(key(type, id), element);
        changes.push({ action, element: structuredClone(element) });
        diff.push(`<${type} old_id="${id}"/>`);
      }
    }
    return { diff, working, changes };
  }

  function fullDocument(type: ElementType, id: number): string {
    const root = elements.get(key(type, id));
    if (!root) throw new HttpError(404, '');
    if (!root.visible) throw new HttpError(410, '');
    const out = new Map<string, StoredElement>([[key(type, id), root]]);
    const addWayWithNodes = (wayId: number) => {
      const way = elements.get(key('way', wayId));
      if (!way?.visible) return;
      out.set(key('way', wayId), way);
      for (const n of way.nodes!) out.set(key('node', n), elements.get(key('node', n))!);
    };
    if (type === 'way') addWayWithNodes(id);
    if (type === 'relation') {
      for (const m of root.members!) {
        if (m.type === 'way') addWayWithNodes(m.ref);
        else {
          const member = elements.get(key(m.type, m.ref));
          if (member?.visible) out.set(key(m.type, m.ref), member);
        }
      }
    }
    const ordered = [...out.values()].sort((a, b) => ['node', 'way', 'relation'].indexOf(a.type) - ['node', 'way', 'relation'].indexOf(b.type));
    return `<osm version="0.6" generator="osm-api-double">${ordered.map((e) => renderElement(e)).join('')}</osm>`;
  }

  function mapDocument(bbox: string | null): string {
    const parts = (bbox ?? '').split(',').map(Number);
    if (parts.length !== 4 || parts.some((v) => !Number.isFinite(v))) throw new HttpError(400, 'The parameter bbox is required, and must be of the form min_lon,min_lat,max_lon,max_lat.');
    const [left, bottom, right, top] = parts as [number, number, number, number];
    if (left > right || bottom > top) throw new HttpError(400, 'The minimum longitude must be less than the maximum longitude, and the minimum latitude less than the maximum latitude');
    if ((right - left) * (top - bottom) > 0.25) throw new HttpError(400, `The maximum bbox size is 0.25, and your request was too large. Either request a smaller area, or use planet.osm`);
    const visible = [...elements.values()].filter((e) => e.visible);
    const nodesIn = new Set(visible.filter((e) => e.type === 'node' && e.lon! >= left && e.lon! <= right && e.lat! >= bottom && e.lat! <= top).map((e) => e.id));
    const ways = visible.filter((e) => e.type === 'way' && e.nodes!.some((n) => nodesIn.has(n)));
    const allNodes = new Set(nodesIn);
    for (const w of ways) for (const n of w.nodes!) allNodes.add(n);
    const wayIds = new Set(ways.map((w) => w.id));
    const relations = visible.filter((e) => e.type === 'relation' && e.members!.some((mb) => (mb.type === 'node' && nodesIn.has(mb.ref)) || (mb.type === 'way' && wayIds.has(mb.ref))));
    const out = [...[...allNodes].map((id) => elements.get(key('node', id))!), ...ways, ...relations];
    return `<osm version="0.6" generator="osm-api-double"><bounds minlat="${bottom}" minlon="${left}" maxlat="${top}" maxlon="${right}"/>${out.map((e) => renderElement(e)).join('')}</osm>`;
  }

  function renderChangeset(c: Changeset): string {
    const tags = Object.entries(c.tags).map(([k, v]) => `<tag k="${escapeXml(k)}" v="${escapeXml(v)}"/>`).join('');
    const closed = c.closedAt ? ` closed_at="${c.closedAt}"` : '';
    return `<osm version="0.6" generator="osm-api-double"><changeset id="${c.id}" created_at="${c.createdAt}"${closed} open="${c.open}" user="${escapeXml(c.user)}" uid="${c.uid}" changes_count="${c.changes.length}">${tags}</changeset></osm>`;
  }

  function renderDownload(c: Changeset): string {
    const blocks: string[] = [];
    let current: string | null = null;
    let buffer: string[] = [];
    const flush = () => {
      if (current) blocks.push(`<${current}>${buffer.join('')}</${current}>`);
      buffer = [];
    };
    for (const change of c.changes) {
      if (change.action !== current) {
        flush();
        current = change.action;
      }
      buffer.push(renderElement(change.element, ` uid="${c.uid}" user="${escapeXml(c.user)}"`));
    }
    flush();
    return `<osmChange version="0.6" generator="osm-api-double">${blocks.join('')}</osmChange>`;
  }

  function requireXml(req: IncomingMessage): void {
    const type = req.headers['content-type'] ?? '';
    if (!/^(text|application)\/xml\b/.test(type)) throw new HttpError(415, `expected an XML body, got content-type "${type}"`);
  }

  function parseChangesetCreate(xml: string): Record<string, string> {
    assertWellFormed(xml, 'changeset');
    let doc: OrderedNode[];
    try {
      doc = orderedParser.parse(xml) as OrderedNode[];
    } catch {
      throw new HttpError(400, 'Cannot parse valid changeset from xml string');
    }
    const osm = doc.find((n) => nameOf(n) === 'osm');
    const changeset = osm && childrenOf(osm).find((n) => nameOf(n) === 'changeset');
    if (!changeset) throw new HttpError(400, 'Cannot parse valid changeset from xml string: no <osm><changeset>');
    return parseTags(childrenOf(changeset), 'changeset');
  }

  async function handle(req: IncomingMessage, body: string): Promise<{ status: number; type: string; body: string }> {
    const url = new URL(req.url ?? '/', 'http://double');
    const path = url.pathname;
    const method = req.method ?? 'GET';
    if (!req.headers['user-agent'] || /^(node|undici)/i.test(req.headers['user-agent'])) throw new HttpError(403, 'identify your application with a User-Agent');
    let m: RegExpExecArray | null;
    if (path === '/api/0.6/changeset/create') {
      if (method !== 'PUT') throw new HttpError(405, 'Only method PUT is supported');
      const user = authenticate(req);
      requireXml(req);
      const tags = parseChangesetCreate(body);
      const id = nextId.changeset++;
      changesets.set(id, { id, uid: user.uid, user: user.displayName, open: true, tags, createdAt: new Date().toISOString(), changes: [] });
      return { status: 200, type: 'text/plain', body: String(id) };
    }
    if ((m = /^\/api\/0\.6\/changeset\/(\d+)$/.exec(path)) && method === 'PUT') {
      const user = authenticate(req);
      requireXml(req);
      const changeset = ownOpenChangeset(Number(m[1]), user);
      changeset.tags = parseChangesetCreate(body);
      return { status: 200, type: 'application/xml', body: renderChangeset(changeset) };
    }
    if ((m = /^\/api\/0\.6\/changeset\/(\d+)$/.exec(path))) {
      if (method !== 'GET') throw new HttpError(405, 'Only method GET or PUT is supported');
      const changeset = changesets.get(Number(m[1]));
      if (!changeset) throw new HttpError(404, '');
      return { status: 200, type: 'application/xml', body: renderChangeset(changeset) };
    }
    if ((m = /^\/api\/0\.6\/changeset\/(\d+)\/upload$/.exec(path))) {
      if (method !== 'POST') throw new HttpError(405, 'Only method POST is supported');
      const user = authenticate(req);
      requireXml(req);
      const changeset = ownOpenChangeset(Number(m[1]), user);
      const { diff, working, changes } = applyUpload(body, changeset);
      // As the real server: a changeset holds at most 10 000 changes; the upload that would pass the
      // limit is refused whole (409) and the changeset is closed.
      if (changeset.changes.length + changes.length > maxChanges) {
        changeset.open = false;
        changeset.closedAt = new Date().toISOString();
        throw new HttpError(409, `The changeset ${changeset.id} was closed at ${changeset.closedAt}`);
      }
      elements = working;
      for (const c of changes) remember(c.element);
      changeset.changes.push(...changes);
      acceptedUploads.push(body);
      return { status: 200, type: 'application/xml', body: `<diffResult version="0.6" generator="osm-api-double">${diff.join('')}</diffResult>` };
    }
    if ((m = /^\/api\/0\.6\/changeset\/(\d+)\/close$/.exec(path))) {
      if (method !== 'PUT') throw new HttpError(405, 'Only method PUT is supported');
      const user = authenticate(req);
      const changeset = ownOpenChangeset(Number(m[1]), user);
      changeset.open = false;
      changeset.closedAt = new Date().toISOString();
      return { status: 200, type: 'text/plain', body: '' };
    }
    if ((m = /^\/api\/0\.6\/changeset\/(\d+)\/download$/.exec(path))) {
      if (method !== 'GET') throw new HttpError(405, 'Only method GET is supported');
      const changeset = changesets.get(Number(m[1]));
      if (!changeset) throw new HttpError(404, '');
      return { status: 200, type: 'application/xml', body: renderDownload(changeset) };
    }
    if (path === '/api/0.6/user/details') {
      const user = authenticate(req);
      return { status: 200, type: 'application/xml', body: `<osm version="0.6" generator="osm-api-double"><user id="${user.uid}" display_name="${escapeXml(user.displayName)}" account_created="2026-01-01T00:00:00Z"/></osm>` };
    }
    if (path === '/api/0.6/map') {
      if (method !== 'GET') throw new HttpError(405, 'Only method GET is supported');
      return { status: 200, type: 'application/xml', body: mapDocument(url.searchParams.get('bbox')) };
    }
    if ((m = /^\/api\/0\.6\/(node|way|relation)\/(\d+)\/(\d+)$/.exec(path))) {
      if (method !== 'GET') throw new HttpError(405, 'Only method GET is supported');
      const [, type, id, wanted] = m;
      const version = history.get(key(type as ElementType, Number(id)))?.find((e) => e.version === Number(wanted));
      if (!version) throw new HttpError(404, '');
      return { status: 200, type: 'application/xml', body: `<osm version="0.6" generator="osm-api-double">${renderElement(version)}</osm>` };
    }
    if ((m = /^\/api\/0\.6\/(node|way|relation)\/(\d+)(\/full)?$/.exec(path))) {
      if (method !== 'GET') throw new HttpError(405, 'Only method GET is supported');
      const type = m[1] as ElementType;
      const id = Number(m[2]);
      if (m[3]) {
        if (type === 'node') throw new HttpError(404, '');
        return { status: 200, type: 'application/xml', body: fullDocument(type, id) };
      }
      const element = elements.get(key(type, id));
      if (!element) throw new HttpError(404, '');
      if (!element.visible) throw new HttpError(410, '');
      return { status: 200, type: 'application/xml', body: `<osm version="0.6" generator="osm-api-double">${renderElement(element)}</osm>` };
    }
    throw new HttpError(404, `no route for ${method} ${path}`);
  }

  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let tooLarge = false;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > MAX_BODY_BYTES) tooLarge = true;
      else chunks.push(chunk);
    });
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      const method = req.method ?? 'GET';
      const path = new URL(req.url ?? '/', 'http://double').pathname;
      requests.push({ at: Date.now(), method, path, headers: { ...req.headers }, body });
      if (tooLarge) {
        res.writeHead(413, { 'content-type': 'text/plain' }).end('Request entity too large');
        return;
      }
      const fault = faults.find((f) => f.remaining > 0 && f.method === method && f.path.test(path));
      if (fault) fault.remaining--;
      if (fault?.mode === 'status') {
        res.writeHead(fault.status ?? 503, { 'content-type': 'text/plain', ...(fault.headers ?? {}) }).end('injected fault');
        return;
      }
      handle(req, body)
        .then((answer) => {
          if (fault?.mode === 'drop-after-processing') {
            res.socket?.destroy();
            return;
          }
          if (fault?.mode === 'hold-after-processing') return;
          res.writeHead(answer.status, { 'content-type': `${answer.type}; charset=utf-8` }).end(answer.body);
        })
        .catch((error: unknown) => {
          const status = error instanceof HttpError ? error.status : 500;
          const message = error instanceof Error ? error.message : String(error);
          res.writeHead(status, { 'content-type': 'text/plain; charset=utf-8', ...(status === 409 || status === 412 ? { error: message } : {}) }).end(message);
        });
    });
  });
  const port = await listen(server, 0, '127.0.0.1');

  return {
    url: `http://127.0.0.1:${port}`,
    users,
    requests,
    acceptedUploads,
    injectFault: (fault) => faults.push({ ...fault, remaining: fault.times ?? 1 }),
    element: (type, id) => elements.get(key(type, id)),
    visible: (type) => [...elements.values()].filter((e) => e.type === type && e.visible),
    changeset: (id) => changesets.get(id),
    changesets: () => [...changesets.values()],
    editAsSomeoneElse(type, id, edit) {
      const current = elements.get(key(type, id));
      if (!current?.visible) throw new Error(`${type} ${id} is not there to edit`);
      const id2 = nextId.changeset++;
      const next = structuredClone(current);
      edit(next);
      Object.assign(next, { version: current.version + 1, changeset: id2 });
      elements.set(key(type, id), next);
      remember(next);
      changesets.set(id2, { id: id2, uid: 7, user: 'someone-else', open: false, tags: {}, createdAt: new Date().toISOString(), closedAt: new Date().toISOString(), changes: [{ action: 'modify', element: structuredClone(next) }] });
      return next;
    },
    seed(xml) {
      assertWellFormed(xml, 'osm');
      const doc = orderedParser.parse(xml) as OrderedNode[];
      const osmRoot = doc.find((n) => nameOf(n) === 'osm');
      if (!osmRoot) throw new Error('seed: no <osm> root');
      let count = 0;
      for (const node of childrenOf(osmRoot)) {
        const type = nameOf(node);
        if (type !== 'node' && type !== 'way' && type !== 'relation') continue;
        const attrs = attrsOf(node);
        const children = childrenOf(node);
        const id = Number(attrs.id);
        const element: StoredElement = { type, id, version: Number(attrs.version ?? 1), changeset: Number(attrs.changeset ?? 1), visible: true, tags: parseTags(children, `${type}/${id}`) };
        if (type === 'node') Object.assign(element, { lat: Number(attrs.lat), lon: Number(attrs.lon) });
        if (type === 'way') element.nodes = children.filter((c) => nameOf(c) === 'nd').map((c) => Number(attrsOf(c).ref));
        if (type === 'relation') element.members = children.filter((c) => nameOf(c) === 'member').map((c) => ({ type: attrsOf(c).type as ElementType, ref: Number(attrsOf(c).ref), role: attrsOf(c).role ?? '' }));
        elements.set(key(type, id), element);
        remember(element);
        nextId[type] = Math.max(nextId[type], id + 1);
        count++;
      }
      return count;
    },
    autoClose(changesetId) {
      const changeset = changesets.get(changesetId);
      if (!changeset) throw new Error(`no changeset ${changesetId}`);
      changeset.open = false;
      changeset.closedAt = new Date().toISOString();
    },
    close: () => closeGracefully(server, 1000),
  };
}
