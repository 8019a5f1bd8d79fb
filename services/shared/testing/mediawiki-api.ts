/**
 * A local MediaWiki action API with the Wikibase calls wikibase-edit v8 makes (read from its source:
 * dist/src/lib/request/{login,get_final_token,post}.js, properties/fetch_properties_datatypes.js,
 * entity/edit.js), plus the reads the exporter makes itself. Real HTTP on 127.0.0.1:0, at /w/api.php.
 *
 * - POST action=login (lgname, lgpassword → NeedToken + session cookie; again with lgtoken → Success
 *   and a fresh session cookie of 32 word characters, as wikibase-edit checks)
 * - GET  action=query&meta=tokens&type=csrf (session cookie or OAuth2 bearer → a 42-character token)
 * - GET  action=query&meta=userinfo, action=query&list=usercontribs
 * - GET  action=wbgetentities (props info for property datatypes; claims/labels for items)
 * - POST action=wbeditentity (new=item or id=Q…, data JSON, summary, token, assert, maxlag, baserevid,
 *   tags, bot); statements may carry references (snaks as a property map or a list, as the Wikibase
 *   JSON model allows), checked against the datatypes like main snaks
 * - POST action=wbsetreference (statement=GUID, snaks JSON, optional reference=hash to replace; adds a
 *   reference to an existing statement, checked like references in wbeditentity)
 * - GET  action=query&list=geosearch (GeoData: gscoord=lat|lon, gsradius 10..10000 m, gslimit ≤ 500;
 *   answers {query: {geosearch: [{pageid, ns, title, lat, lon, dist, primary}]}} over the items' P625)
 * - GET  action=query&list=search&srsearch=haswbstatement:P=V (CirrusSearch; {query: {searchinfo,
 *   search: [{ns, title, pageid}]}})
 * - maxlag: with `setLag(seconds)`, a request whose maxlag is below the lag is refused as MediaWiki
 *   does: HTTP 200, {error: {code: 'maxlag', info: 'Waiting for …: N seconds lagged', lag: N}} and
 *   headers Retry-After and X-Database-Lag (https://www.mediawiki.org/wiki/Manual:Maxlag_parameter)
 *
 * Strict where a real wiki is strict and stricter where it only warns: unknown parameters are errors,
 * POST-only actions refuse GET, tokens must belong to the session, assert=user|bot is enforced,
 * statements are checked against property datatypes and referenced items must exist. Error bodies
 * have MediaWiki's shape ({ error: { code, info } }, HTTP 200).
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage } from 'node:http';
import { closeGracefully, listen } from '../http-server.js';

export interface WikiUser {
  /** The account name contributions are attributed to. */
  name: string;
  /** Bot-password login name (Name@BotName) and its password. */
  loginName: string;
  password: string;
  bot: boolean;
  /** An OAuth2 access token for this user, if any. */
  oauth2Token?: string;
}

export interface Statement {
  id: string;
  type: 'statement';
  rank: string;
  mainsnak: Snak;
  references?: { hash: string; snaks: Record<string, Snak[]>; 'snaks-order': string[] }[];
}

export interface Snak {
  snaktype: string;
  property: string;
  datavalue?: { type: string; value: unknown };
  datatype?: string;
}

export interface StoredItem {
  id: string;
  type: 'item';
  labels: Record<string, { language: string; value: string }>;
  /** Descriptions by language (wbeditentity `descriptions`); absent when none was set. */
  descriptions?: Record<string, { language: string; value: string }>;
  claims: Record<string, Statement[]>;
  lastrevid: number;
  deleted?: boolean;
}

export interface Contribution {
  userid: number;
  user: string;
  pageid: number;
  revid: number;
  parentid: number;
  ns: number;
  title: string;
  timestamp: string;
  comment: string;
}

export interface WikiFault {
  action: string;
  /** Narrows the fault to requests whose parameters match (e.g. meta=tokens). */
  when?: (params: Record<string, string>) => boolean;
  /**
   * `status`: answer the HTTP status without processing; `drop-after-processing`: apply, then cut the
   * connection; `hold-after-processing`: apply and never answer (the client is killed meanwhile).
   */
  mode: 'status' | 'drop-after-processing' | 'hold-after-processing';
  status?: number;
  times?: number;
}

export interface MediaWikiDouble {
  /** The instance root for wikibase-edit (`instance`), e.g. http://127.0.0.1:1234. */
  url: string;
  readonly items: Map<string, StoredItem>;
  readonly contributions: Contribution[];
  readonly requests: { method: string; params: Record<string, string>; headers: IncomingMessage['headers'] }[];
  injectFault(fault: WikiFault): void;
  /** Replica lag in seconds for the next `times` requests that send maxlag (default: all). */
  setLag(seconds: number, times?: number, retryAfterSeconds?: number): void;
  /** An item as the community made it (no contribution by our users); returns its id. */
  addItem(item: { labels?: Record<string, string>; claims?: Record<string, { value: unknown; type: string }[]> }): string;
  /** Items created through wbeditentity (not the seeded class items). */
  createdItems(): StoredItem[];
  close(): Promise<void>;
}

class ApiError extends Error {
  constructor(
    readonly code: string,
    readonly info: string,
  ) {
    super(info);
  }
}

const ALLOWED_PARAMS: Record<string, string[]> = {
  login: ['lgname', 'lgpassword', 'lgtoken'],
  query: ['meta', 'type', 'list', 'ucuser', 'ucprop', 'uclimit', 'ucdir', 'ucnamespace', 'gscoord', 'gsradius', 'gslimit', 'gsnamespace', 'srsearch', 'srlimit', 'srnamespace', 'maxlag'],
  wbgetentities: ['ids', 'props', 'languages', 'redirects', 'maxlag'],
  wbeditentity: ['new', 'id', 'data', 'summary', 'baserevid', 'token', 'assert', 'maxlag', 'tags', 'bot', 'clear'],
  wbsetreference: ['statement', 'snaks', 'reference', 'index', 'snaks-order', 'summary', 'baserevid', 'token', 'assert', 'maxlag', 'tags', 'bot'],
};
const POST_ONLY = new Set(['login', 'wbeditentity', 'wbsetreference']);
const EARTH = 'http://www.wikidata.org/entity/Q2';
const ITEM_ID = /^Q[1-9]\d*$/;

interface Session {
  id: string;
  loginToken?: string;
  user?: WikiUser;
  csrf: string;
}

function haversine(lat1: number, lon1: number, lat2: number, lon2: number): number {
  const rad = Math.PI / 180;
  const h = Math.sin(((lat2 - lat1) * rad) / 2) ** 2 + Math.cos(lat1 * rad) * Math.cos(lat2 * rad) * Math.sin(((lon2 - lon1) * rad) / 2) ** 2;
  return 2 * 6_371_000 * Math.asin(Math.sqrt(h));
}

export async function startMediaWikiDouble(
  options: {
    users?: WikiUser[];
    /** Property id → datatype. */
    properties?: Record<string, string>;
    /** Item ids that exist from the start (the classes P31 points at). */
    seedItems?: string[];
    /** Title prefix of items: '' on Wikidata, 'Item:' on a default Wikibase install. */
    itemNamespacePrefix?: string;
  } = {},
): Promise<MediaWikiDouble> {
  const users = options.users ?? [{ name: 'Exporter', loginName: 'Exporter@qc', password: 'bot-password-123', bot: false, oauth2Token: 'wiki-oauth2-token' }];
  const properties = options.properties ?? { P31: 'wikibase-item', P625: 'globe-coordinate', P248: 'wikibase-item', P854: 'url', P813: 'time', P402: 'external-id', P143: 'wikibase-item' };
  let lag = { seconds: 0, remaining: 0, retryAfter: 5 };
  const prefix = options.itemNamespacePrefix ?? 'Item:';
  const items = new Map<string, StoredItem>();
  let nextItem = 1000;
  let nextRevision = 1;
  for (const id of options.seedItems ?? ['Q39614', 'Q4989906']) items.set(id, { id, type: 'item', labels: {}, claims: {}, lastrevid: nextRevision++ });
  const seeded = new Set(items.keys());
  const sessions = new Map<string, Session>();
  const contributions: Contribution[] = [];
  const requests: MediaWikiDouble['requests'] = [];
  const faults: (WikiFault & { remaining: number })[] = [];

  const newSession = (): Session => {
    const session = { id: randomBytes(16).toString('hex'), csrf: `${randomBytes(20).toString('hex')}+\\` };
    sessions.set(session.id, session);
    return session;
  };
  const oauthSessions = new Map<string, Session>();

  /** The caller: a logged-in session cookie or a valid OAuth2 bearer token; null for anonymous. */
  function caller(req: IncomingMessage): Session | null {
    const bearer = /^Bearer (\S+)$/.exec(req.headers.authorization ?? '')?.[1];
    if (bearer) {
      const user = users.find((u) => u.oauth2Token === bearer);
      if (!user) throw new ApiError('mwoauth-invalid-authorization', 'The authorization headers in your request are not valid: Invalid access token');
      let session = oauthSessions.get(bearer);
      if (!session) {
        session = { id: `oauth2-${user.name}`, csrf: `${randomBytes(20).toString('hex')}+\\`, user };
        oauthSessions.set(bearer, session);
      }
      return session;
    }
    const sessionId = /(?:^|;\s*)wikibase_session=(\w+)/.exec(req.headers.cookie ?? '')?.[1];
    const session = sessionId ? sessions.get(sessionId) : undefined;
    return session?.user ? session : null;
  }

  function login(req: IncomingMessage, params: Record<string, string>): { body: unknown; cookies: string[] } {
    const { lgname, lgpassword, lgtoken } = params;
    if (!lgname || !lgpassword) throw new ApiError('missingparam', 'The lgname and lgpassword parameters are required');
    if (lgtoken === undefined) {
      const session = newSession();
      session.loginToken = `${randomBytes(20).toString('hex')}+\\`;
      return { body: { warnings: {}, login: { result: 'NeedToken', token: session.loginToken } }, cookies: [`wikibase_session=${session.id}; path=/; HttpOnly`] };
    }
    const sessionId = /(?:^|;\s*)wikibase_session=(\w+)/.exec(req.headers.cookie ?? '')?.[1];
    const pending = sessionId ? sessions.get(sessionId) : undefined;
    if (!pending?.loginToken || pending.loginToken !== lgtoken) return { body: { login: { result: 'WrongToken' } }, cookies: [] };
    const user = users.find((u) => u.loginName === lgname && u.password === lgpassword);
    if (!user) return { body: { login: { result: 'Failed', reason: 'Incorrect username or password entered. Please try again.' } }, cookies: [] };
    sessions.delete(pending.id);
    const session = newSession();
    session.user = user;
    return {
      body: { login: { result: 'Success', lguserid: users.indexOf(user) + 1, lgusername: user.name } },
      cookies: [`wikibase_session=${session.id}; path=/; HttpOnly`, `wikibaseUserID=${users.indexOf(user) + 1}; path=/`, `wikibaseUserName=${user.name}; path=/`],
    };
  }

  function query(req: IncomingMessage, params: Record<string, string>): unknown {
    const session = caller(req);
    if (params.meta === 'tokens') {
      if (params.type !== 'csrf') throw new ApiError('badvalue', 'Only type=csrf is supported by this double');
      return { batchcomplete: '', query: { tokens: { csrftoken: session ? session.csrf : '+\\' } } };
    }
    if (params.meta === 'userinfo') {
      const user = session?.user;
      return { batchcomplete: '', query: { userinfo: user ? { id: users.indexOf(user) + 1, name: user.name } : { id: 0, name: '127.0.0.1', anon: '' } } };
    }
    if (params.list === 'usercontribs') {
      if (!params.ucuser) throw new ApiError('missingparam', 'One of the parameters ucuser, ucuserids, ucuserprefix and uciprange is required.');
      const allowedProps = new Set(['ids', 'title', 'timestamp', 'comment', 'size', 'flags']);
      const props = (params.ucprop ?? 'ids|title|timestamp|comment|size|flags').split('|');
      const bad = props.find((p) => !allowedProps.has(p));
      if (bad) throw new ApiError('badvalue', `Unrecognized value for parameter "ucprop": ${bad}`);
      const limit = Number(params.uclimit ?? '10');
      if (!Number.isInteger(limit) || limit < 1 || limit > 500) throw new ApiError('badinteger', `Invalid value "${params.uclimit}" for integer parameter "uclimit".`);
      const mine = contributions.filter((c) => c.user === params.ucuser);
      const ordered = params.ucdir === 'newer' ? mine : [...mine].reverse();
      return { batchcomplete: '', query: { usercontribs: ordered.slice(0, limit) } };
    }
    if (params.list === 'geosearch') {
      const coord = /^(-?\d+(?:\.\d+)?)\|(-?\d+(?:\.\d+)?)$/.exec(params.gscoord ?? '');
      if (!coord) throw new ApiError('invalid-coordinate', 'Invalid coordinate provided');
      const radius = Number(params.gsradius ?? '500');
      if (!Number.isInteger(radius) || radius < 10 || radius > 10000) throw new ApiError('outofrange', `Invalid value "${params.gsradius}" for integer parameter "gsradius": must be between 10 and 10000.`);
      const limit = Number(params.gslimit ?? '10');
      if (!Number.isInteger(limit) || limit < 1 || limit > 500) throw new ApiError('badinteger', `Invalid value "${params.gslimit}" for integer parameter "gslimit".`);
      const [lat, lon] = [Number(coord[1]), Number(coord[2])];
      const hits = [...items.values()]
        .filter((item) => !item.deleted)
        .flatMap((item) => {
          const value = item.claims.P625?.[0]?.mainsnak.datavalue?.value as { latitude: number; longitude: number } | undefined;
          if (!value) return [];
          const dist = haversine(lat, lon, value.latitude, value.longitude);
          return dist <= radius ? [{ pageid: Number(item.id.slice(1)), ns: prefix ? 120 : 0, title: `${prefix}${item.id}`, lat: value.latitude, lon: value.longitude, dist: Number(dist.toFixed(1)), primary: '' }] : [];
        })
        .sort((a, b) => a.dist - b.dist)
        .slice(0, limit);
      return { batchcomplete: '', query: { geosearch: hits } };
    }
    if (params.list === 'search') {
      const match = /^haswbstatement:(P[1-9]\d*)=(\S+)$/.exec(params.srsearch ?? '');
      if (!match) throw new ApiError('badvalue', 'This double searches haswbstatement:P=V only');
      const [, property, wanted] = match;
      const found = [...items.values()].filter((item) => !item.deleted && (item.claims[property!] ?? []).some((s) => {
        const v = s.mainsnak.datavalue?.value;
        return (typeof v === 'string' ? v : (v as { id?: string } | undefined)?.id) === wanted;
      }));
      return { batchcomplete: '', query: { searchinfo: { totalhits: found.length }, search: found.slice(0, Number(params.srlimit ?? '10')).map((item) => ({ ns: prefix ? 120 : 0, title: `${prefix}${item.id}`, pageid: Number(item.id.slice(1)) })) } };
    }
    throw new ApiError('badvalue', 'This double supports meta=tokens, meta=userinfo, list=usercontribs, list=geosearch and list=search');
  }

  function getEntities(params: Record<string, string>): unknown {
    const ids = (params.ids ?? '').split('|').filter(Boolean);
    if (ids.length === 0 || ids.length > 50) throw new ApiError('param-missing', 'Either provide the item "ids" or pairs of "sites" and "titles"');
    const props = new Set((params.props ?? 'info|sitelinks|aliases|labels|descriptions|claims|datatype').split('|'));
    const entities: Record<string, unknown> = {};
    for (const id of ids) {
      if (/^P\d+$/.test(id)) {
        const datatype = properties[id];
        entities[id] = datatype ? { type: 'property', datatype, id, pageid: 1, ns: 120, title: `Property:${id}`, lastrevid: 1 } : { id, missing: '' };
        continue;
      }
      if (!ITEM_ID.test(id)) throw new ApiError('no-such-entity', `Could not find an entity with the ID "${id}".`);
      const item = items.get(id);
      if (!item || item.deleted) {
        entities[id] = { id, missing: '' };
        continue;
      }
      const out: Record<string, unknown> = { type: 'item', id, title: `${prefix}${id}`, lastrevid: item.lastrevid };
      if (props.has('labels')) out.labels = item.labels;
      if (props.has('claims')) out.claims = item.claims;
      entities[id] = out;
    }
    return { entities, success: 1 };
  }

  function checkStatement(property: string, statement: Record<string, unknown>): Statement {
    const mainsnak = statement.mainsnak as Statement['mainsnak'] | undefined;
    if (!mainsnak || mainsnak.property !== property) throw new ApiError('modification-failed', `Statement for ${property} has a mainsnak of another property`);
    const datatype = checkSnak(property, mainsnak);
    if (statement.type !== 'statement' || (statement.rank !== undefined && !['normal', 'preferred', 'deprecated'].includes(String(statement.rank)))) {
      throw new ApiError('modification-failed', 'A statement needs type "statement" and a valid rank');
    }
    const checked: Statement = { id: '', type: 'statement', rank: String(statement.rank ?? 'normal'), mainsnak: { ...mainsnak, datatype } };
    if (statement.references !== undefined) {
      if (!Array.isArray(statement.references)) throw new ApiError('modification-failed', 'references must be a list');
      checked.references = (statement.references as { snaks?: unknown }[]).map((reference) => checkReference(reference.snaks));
    }
    return checked;
  }

  /** Reference snaks: the Wikibase JSON model's {P: [snak]}, or the plain list the API also takes. */
  function checkReference(input: unknown): NonNullable<Statement['references']>[number] {
    const list = Array.isArray(input) ? (input as Snak[]) : Object.values((input ?? {}) as Record<string, Snak[]>).flat();
    if (list.length === 0) throw new ApiError('modification-failed', 'A reference needs at least one snak');
    const snaks: Record<string, Snak[]> = {};
    for (const snak of list) {
      if (typeof snak?.property !== 'string') throw new ApiError('modification-failed', 'A reference snak needs a property');
      (snaks[snak.property] ??= []).push({ ...snak, datatype: checkSnak(snak.property, snak) });
    }
    return { hash: randomBytes(20).toString('hex'), snaks, 'snaks-order': Object.keys(snaks) };
  }

  function setReference(req: IncomingMessage, params: Record<string, string>): unknown {
    const session = caller(req);
    if (params.token === undefined) throw new ApiError('missingparam', 'The "token" parameter must be set.');
    if (!session || params.token !== session.csrf) throw new ApiError('badtoken', 'Invalid CSRF token.');
    const itemId = /^(Q[1-9]\d*)\$/i.exec(params.statement ?? '')?.[1]?.toUpperCase();
    const item = itemId ? items.get(itemId) : undefined;
    const statement = item && !item.deleted ? Object.values(item.claims).flat().find((s) => s.id === params.statement) : undefined;
    if (!item || !statement) throw new ApiError('no-such-claim', `Could not find the claim ${params.statement ?? ''}`);
    let raw: unknown;
    try {
      raw = JSON.parse(params.snaks ?? '');
    } catch {
      throw new ApiError('invalid-json', 'Could not parse the "snaks" JSON');
    }
    const reference = checkReference(raw);
    statement.references ??= [];
    const index = params.reference ? statement.references.findIndex((r) => r.hash === params.reference) : -1;
    if (params.reference && index < 0) throw new ApiError('no-such-reference', `Could not find the reference ${params.reference}`);
    if (index >= 0) statement.references[index] = reference;
    else statement.references.push(reference);
    const parent = item.lastrevid;
    item.lastrevid = nextRevision++;
    const user = session.user!;
    contributions.push({ userid: users.indexOf(user) + 1, user: user.name, pageid: Number(item.id.slice(1)), revid: item.lastrevid, parentid: parent, ns: prefix ? 120 : 0, title: `${prefix}${item.id}`, timestamp: new Date().toISOString(), comment: `/* wbsetreference-add:1| */ ${params.summary ?? ''}`.trim() });
    return { pageinfo: { lastrevid: item.lastrevid }, success: 1, reference };
  }

  /** A value snak against its property's datatype; answers the datatype. */
  function checkSnak(property: string, mainsnak: Snak): string {
    const datatype = properties[property];
    if (!datatype) throw new ApiError('modification-failed', `Property ${property} not found`);
    if (mainsnak.snaktype !== 'value') throw new ApiError('modification-failed', 'Only value snaks are supported by this double');
    const value = mainsnak.datavalue?.value as Record<string, unknown> | undefined;
    if (datatype === 'wikibase-item') {
      if (mainsnak.datavalue?.type !== 'wikibase-entityid' || typeof value?.id !== 'string' || value['entity-type'] !== 'item') {
        throw new ApiError('modification-failed', `Bad value for ${property}: expected a wikibase-entityid of an item`);
      }
      const target = items.get(value.id);
      if (!target || target.deleted) throw new ApiError('modification-failed', `wikibase-validator-no-such-entity: ${value.id}`);
    } else if (datatype === 'globe-coordinate') {
      const { latitude, longitude, precision, globe } = (value ?? {}) as Record<string, unknown>;
      if (mainsnak.datavalue?.type !== 'globecoordinate' || typeof latitude !== 'number' || typeof longitude !== 'number' || typeof precision !== 'number' || precision <= 0) {
        throw new ApiError('modification-failed', `Bad value for ${property}: expected a globecoordinate with latitude, longitude and precision`);
      }
      if (Math.abs(latitude) > 90 || Math.abs(longitude) > 360) throw new ApiError('modification-failed', 'Latitude or longitude out of range');
      if (globe !== EARTH) throw new ApiError('modification-failed', `Unsupported globe ${String(globe)}`);
    } else if (datatype === 'url') {
      if (mainsnak.datavalue?.type !== 'string' || typeof mainsnak.datavalue.value !== 'string' || !/^https?:\/\/\S+$/.test(mainsnak.datavalue.value)) throw new ApiError('modification-failed', `Bad value for ${property}: expected a URL string`);
    } else if (datatype === 'external-id') {
      if (mainsnak.datavalue?.type !== 'string' || typeof mainsnak.datavalue.value !== 'string' || mainsnak.datavalue.value === '') throw new ApiError('modification-failed', `Bad value for ${property}: expected a string`);
    } else if (datatype === 'time') {
      const t = (value ?? {}) as Record<string, unknown>;
      if (mainsnak.datavalue?.type !== 'time' || typeof t.time !== 'string' || !/^[+-]\d{4,}-\d\d-\d\dT00:00:00Z$/.test(t.time) || typeof t.precision !== 'number' || typeof t.calendarmodel !== 'string') {
        throw new ApiError('modification-failed', `Bad value for ${property}: expected a time value (+YYYY-MM-DDT00:00:00Z, precision, calendarmodel)`);
      }
    } else {
      throw new ApiError('modification-failed', `This double does not know datatype ${datatype}`);
    }
    return datatype;
  }

  function editEntity(req: IncomingMessage, params: Record<string, string>): unknown {
    const session = caller(req);
    if (params.token === undefined) throw new ApiError('missingparam', 'The "token" parameter must be set.');
    if (!session || params.token !== session.csrf) throw new ApiError('badtoken', 'Invalid CSRF token.');
    if (params.assert === 'user' && !session.user) throw new ApiError('assertuserfailed', 'You are no longer logged in');
    if (params.assert === 'bot' && !session.user?.bot) throw new ApiError('assertbotfailed', 'You do not have the "bot" right');
    if (params.assert !== undefined && params.assert !== 'user' && params.assert !== 'bot') throw new ApiError('badvalue', 'Unrecognized value for parameter "assert"');
    if (params.maxlag !== undefined && !/^\d+$/.test(params.maxlag)) throw new ApiError('badinteger', 'Invalid value for "maxlag"');
    if ((params.new === undefined) === (params.id === undefined)) throw new ApiError('param-illegal', 'Either provide the item "id" or "new", not both and not none');
    if (params.new !== undefined && params.new !== 'item') throw new ApiError('badvalue', 'This double creates items only');
    if (params.clear !== undefined) throw new ApiError('badvalue', 'clear is not used by the exporter and refused by this double');
    let data: Record<string, unknown>;
    try {
      data = JSON.parse(params.data ?? '') as Record<string, unknown>;
    } catch {
      throw new ApiError('invalid-json', 'Could not parse the "data" JSON');
    }
    const unknownKey = Object.keys(data).find((k) => !['labels', 'descriptions', 'aliases', 'claims', 'sitelinks'].includes(k));
    if (unknownKey) throw new ApiError('not-recognized', `Unknown key in json: ${unknownKey}`);

    let item: StoredItem;
    if (params.id !== undefined) {
      const existing = items.get(params.id);
      if (!existing || existing.deleted) throw new ApiError('no-such-entity', `Could not find an entity with the ID "${params.id}".`);
      if (params.baserevid !== undefined && Number(params.baserevid) !== existing.lastrevid) throw new ApiError('editconflict', 'Edit conflict: the entity changed since baserevid');
      item = structuredClone(existing);
    } else {
      item = { id: `Q${nextItem}`, type: 'item', labels: {}, claims: {}, lastrevid: 0 };
    }

    for (const [lang, label] of Object.entries((data.labels ?? {}) as Record<string, { language?: string; value?: string; remove?: unknown }>)) {
      if (label.language !== lang) throw new ApiError('inconsistent-language', `Inconsistent language: ${lang} and ${String(label.language)}`);
      if ('remove' in label) {
        delete item.labels[lang];
        continue;
      }
      if (typeof label.value !== 'string' || label.value.trim() === '' || label.value.length > 250) throw new ApiError('modification-failed', `Invalid label for ${lang}`);
      item.labels[lang] = { language: lang, value: label.value };
    }
    for (const [lang, description] of Object.entries((data.descriptions ?? {}) as Record<string, { language?: string; value?: string }>)) {
      if (description.language !== lang) throw new ApiError('inconsistent-language', `Inconsistent language: ${lang} and ${String(description.language)}`);
      if (typeof description.value !== 'string' || description.value.length > 250) throw new ApiError('modification-failed', `Invalid description for ${lang}`);
      // As Wikibase: a label and a description together must not be another item's in that language.
      const clash = [...items.values()].find((other) => other.id !== item.id && !other.deleted && other.labels[lang]?.value === item.labels[lang]?.value && other.descriptions?.[lang]?.value === description.value);
      if (clash) throw new ApiError('modification-failed', `Item ${clash.id} already has label "${item.labels[lang]?.value}" associated with language code ${lang}, using the same description text.`);
      item.descriptions = { ...(item.descriptions ?? {}), [lang]: { language: lang, value: description.value } };
    }
    for (const [property, statements] of Object.entries((data.claims ?? {}) as Record<string, Record<string, unknown>[]>)) {
      if (!Array.isArray(statements)) throw new ApiError('invalid-claim', `Claims of ${property} must be a list`);
      for (const statement of statements) {
        if ('remove' in statement) {
          const list = item.claims[property] ?? [];
          const index = list.findIndex((s) => s.id === statement.id);
          if (index < 0) throw new ApiError('modification-failed', `Claim ${String(statement.id)} not found on ${item.id}`);
          list.splice(index, 1);
          if (list.length === 0) delete item.claims[property];
          continue;
        }
        const checked = checkStatement(property, statement);
        checked.id = `${item.id}$${randomUUID().toUpperCase()}`;
        (item.claims[property] ??= []).push(checked);
      }
    }

    const before = items.get(item.id);
    const unchanged = before && JSON.stringify({ l: before.labels, c: before.claims }) === JSON.stringify({ l: item.labels, c: item.claims });
    if (unchanged) return { entity: { ...before, descriptions: {}, aliases: {}, sitelinks: {} }, success: 1, nochange: '' };
    if (params.new !== undefined) nextItem++;
    item.lastrevid = nextRevision++;
    items.set(item.id, item);
    const user = session.user!;
    const autocomment = params.new !== undefined ? '/* wbeditentity-create-item:0| */' : '/* wbeditentity-update:0| */';
    contributions.push({
      userid: users.indexOf(user) + 1,
      user: user.name,
      pageid: Number(item.id.slice(1)),
      revid: item.lastrevid,
      parentid: before?.lastrevid ?? 0,
      ns: prefix ? 120 : 0,
      title: `${prefix}${item.id}`,
      timestamp: new Date().toISOString(),
      comment: params.summary ? `${autocomment} ${params.summary}` : autocomment,
    });
    return { entity: { ...item, descriptions: {}, aliases: {}, sitelinks: {} }, success: 1 };
  }

  async function readParams(req: IncomingMessage, url: URL): Promise<Record<string, string>> {
    const params: Record<string, string> = Object.fromEntries(url.searchParams);
    if (req.method === 'POST') {
      const type = req.headers['content-type'] ?? '';
      if (!type.startsWith('application/x-www-form-urlencoded')) throw new ApiError('badcontenttype', `Unsupported content-type "${type}"`);
      const chunks: Buffer[] = [];
      let size = 0;
      for await (const chunk of req as AsyncIterable<Buffer>) {
        size += chunk.length;
        if (size > 2 * 1024 * 1024) throw new ApiError('toobig', 'The request body is too large');
        chunks.push(chunk);
      }
      for (const [k, v] of new URLSearchParams(Buffer.concat(chunks).toString('utf8'))) {
        if (k in params && k !== 'action' && k !== 'format') throw new ApiError('multivalue', `Parameter ${k} given twice`);
        params[k] = v;
      }
    }
    return params;
  }

  const server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://double');
    const reply = (body: unknown, cookies: string[] = []) => {
      res.writeHead(200, { 'content-type': 'application/json; charset=utf-8', ...(cookies.length > 0 ? { 'set-cookie': cookies } : {}) });
      res.end(JSON.stringify(body));
    };
    void (async () => {
      try {
        if (url.pathname !== '/w/api.php') {
          res.writeHead(404).end();
          return;
        }
        const params = await readParams(req, url);
        requests.push({ method: req.method ?? 'GET', params: { ...params }, headers: { ...req.headers } });
        const action = params.action ?? '';
        const fault = faults.find((f) => f.remaining > 0 && f.action === action && (f.when?.(params) ?? true));
        if (fault) fault.remaining--;
        if (fault?.mode === 'status') {
          res.writeHead(fault.status ?? 503, { 'content-type': 'text/html' }).end('<html>injected fault</html>');
          return;
        }
        if (!req.headers['user-agent']) throw new ApiError('nouseragent', 'A User-Agent is required');
        if (params.format !== 'json') throw new ApiError('badvalue', 'This double answers format=json only');
        const allowed = ALLOWED_PARAMS[action];
        if (!allowed) throw new ApiError('badvalue', `Unrecognized value for parameter "action": ${action}`);
        const unknown = Object.keys(params).find((k) => k !== 'action' && k !== 'format' && !allowed.includes(k));
        if (unknown) throw new ApiError('unknownparam', `Unrecognized parameter: ${unknown}`);
        if (POST_ONLY.has(action) && req.method !== 'POST') throw new ApiError('mustbeposted', `The "${action}" module requires a POST request.`);
        if (params.maxlag !== undefined && lag.remaining > 0 && Number(params.maxlag) < lag.seconds) {
          lag.remaining--;
          res.writeHead(200, { 'content-type': 'application/json; charset=utf-8', 'retry-after': String(lag.retryAfter), 'x-database-lag': String(lag.seconds) });
          res.end(JSON.stringify({ error: { code: 'maxlag', info: `Waiting for 10.64.0.1: ${lag.seconds} seconds lagged`, host: '10.64.0.1', lag: lag.seconds, type: 'db' } }));
          return;
        }
        let answer: { body: unknown; cookies: string[] };
        if (action === 'login') answer = login(req, params);
        else if (action === 'query') answer = { body: query(req, params), cookies: [] };
        else if (action === 'wbgetentities') answer = { body: getEntities(params), cookies: [] };
        else if (action === 'wbsetreference') answer = { body: setReference(req, params), cookies: [] };
        else answer = { body: editEntity(req, params), cookies: [] };
        if (fault?.mode === 'drop-after-processing') {
          res.socket?.destroy();
          return;
        }
        if (fault?.mode === 'hold-after-processing') return;
        reply(answer.body, answer.cookies);
      } catch (error) {
        if (error instanceof ApiError) {
          reply({ error: { code: error.code, info: error.info } });
        } else {
          res.writeHead(500, { 'content-type': 'text/plain' }).end('internal error');
        }
      }
    })();
  });
  const port = await listen(server, 0, '127.0.0.1');

  return {
    url: `http://127.0.0.1:${port}`,
    items,
    contributions,
    requests,
    injectFault: (fault) => faults.push({ ...fault, remaining: fault.times ?? 1 }),
    setLag: (seconds, times, retryAfterSeconds) => {
      lag = { seconds, remaining: times ?? Number.MAX_SAFE_INTEGER, retryAfter: retryAfterSeconds ?? 5 };
    },
    addItem(input) {
      const id = `Q${nextItem++}`;
      const item: StoredItem = { id, type: 'item', labels: {}, claims: {}, lastrevid: nextRevision++ };
      for (const [lang, value] of Object.entries(input.labels ?? {})) item.labels[lang] = { language: lang, value };
      for (const [property, values] of Object.entries(input.claims ?? {})) {
        item.claims[property] = values.map((v) => ({ id: `${id}$${randomUUID().toUpperCase()}`, type: 'statement', rank: 'normal', mainsnak: { snaktype: 'value', property, datavalue: { type: v.type, value: v.value }, datatype: properties[property] ?? 'string' } }));
      }
      items.set(id, item);
      seeded.add(id);
      return id;
    },
    createdItems: () => [...items.values()].filter((i) => !seeded.has(i.id) && !i.deleted),
    close: () => closeGracefully(server, 1000),
  };
}
