/**
 * A local Overpass API for tests: real HTTP on 127.0.0.1:0, answering the subset of Overpass QL the
 * conflation lookup sends, over the data of an OSM API double (so both see one world).
 *
 * Request (https://wiki.openstreetmap.org/wiki/Overpass_API/Language_Guide,
 * https://dev.overpass-api.de/overpass-doc/en/preface/commandline.html):
 *   POST /api/interpreter with an application/x-www-form-urlencoded body `data=<query>`, or
 *   GET /api/interpreter?data=<query>. The query this double understands:
 *
 *     [out:json][timeout:25][bbox:south,west,north,east];
 *     (
 *       nwr["k"="v"]["k2"~"^(a|b)$"];
 *       …
 *     );
 *     out body geom;
 *
 *   or, with the areas covering a point (is_in makes areas of closed ways and multipolygons):
 *
 *     [out:json][timeout:25];
 *     is_in(lat,lon)->.covering;
 *     (
 *       nwr["k"="v"](south,west,north,east);
 *       way(pivot.covering)["k"="v"];
 *       rel(pivot.covering)["k"="v"];
 *     );
 *     out body geom;
 *
 * Response (https://wiki.openstreetmap.org/wiki/OSM_JSON, "Overpass API" output): 200
 * application/json {version: 0.6, generator, osm3s: {timestamp_osm_base, copyright}, elements: [...]}
 * where a node has lat/lon; a way has `bounds`, `nodes` and `geometry` [{lat, lon}]; a relation has
 * `bounds` and `members` [{type, ref, role, geometry | lat/lon}]. A query it cannot parse gets 400
 * with an HTML body naming the line, as the real server's "parse error" page. With `tooManyRequests`
 * it answers 429 (the real server's rate limit), with `runtimeError` a 200 JSON with a `remark`.
 *
 * bbox semantics as Overpass: a node inside; a way with a node inside or a segment crossing the box;
 * a relation with a member inside (ways as above).
 */
import { createServer, type IncomingMessage } from 'node:http';
import { closeGracefully, listen } from '../../services/shared/http-server.js';
import type { ElementType, OsmApiDouble, StoredElement } from '../../services/shared/testing/osm-api.js';

export interface OverpassDouble {
  url: string;
  /** Every query received (decoded). */
  readonly queries: string[];
  /** Answer the next `times` queries with 429 Too Many Requests. */
  tooManyRequests(times?: number): void;
  /** Answer the next query with a runtime-error remark (as on a server timeout). */
  runtimeError(): void;
  /** Hold the next query forever (the client is killed meanwhile). */
  holdNext(): void;
  close(): Promise<void>;
}

class QueryError extends Error {}

interface Filter {
  key: string;
  test: (value: string | undefined) => boolean;
}

type Box = [number, number, number, number];

/** One statement of the union: nwr[…] in a box, or way/rel(pivot.covering)[…] (areas covering the is_in point). */
interface Statement {
  filters: Filter[];
  box: Box | null;
  pivot: 'way' | 'relation' | null;
}

const unescape = (s: string) => s.replace(/\\(["\\])/g, '$1');
const FILTER = String.raw`\["(?:[^"\\]|\\.)*"(?:=|~)"(?:[^"\\]|\\.)*"\]`;
const NUM = String.raw`-?[\d.]+`;
const BOX = String.raw`\((${NUM}),(${NUM}),(${NUM}),(${NUM})\)`;

function checkBox(box: Box, line: number): Box {
  if (box[0] > box[2] || box[1] > box[3] || Math.abs(box[0]) > 90 || Math.abs(box[2]) > 90) throw new QueryError(`line ${line}: static error: the bbox must be south,west,north,east with south <= north`);
  return box;
}

function parseFilters(statement: string): Filter[] {
  const filters: Filter[] = [];
  for (const m of statement.matchAll(/\["((?:[^"\\]|\\.)*)"(=|~)"((?:[^"\\]|\\.)*)"\]/g)) {
    const key = unescape(m[1]!);
    const value = unescape(m[3]!);
    if (m[2] === '=') filters.push({ key, test: (v) => v === value });
    else {
      let pattern: RegExp;
      try {
        pattern = new RegExp(value);
      } catch {
        throw new QueryError(`line 3: static error: invalid regular expression "${value}"`);
      }
      filters.push({ key, test: (v) => v !== undefined && pattern.test(v) });
    }
  }
  return filters;
}

/**
 * The two query shapes the conflation lookup sends: with a global `[bbox:…]` and a union of
 * `nwr[…];`, or with `is_in(lat,lon)->.covering;` and a union of `nwr[…](s,w,n,e);`,
 * `way(pivot.covering)[…];` and `rel(pivot.covering)[…];`.
 */
function parseQuery(query: string): { statements: Statement[]; isIn: [number, number] | null } {
  const text = query.trim();
  const settings = new RegExp(String.raw`^\[out:json\](?:\[timeout:(\d+)\])?(?:\[bbox:(${NUM}),(${NUM}),(${NUM}),(${NUM})\])?;\s*`).exec(text);
  if (!settings) throw new QueryError('line 1: parse error: expected [out:json][timeout:N][bbox:s,w,n,e]; or [out:json][timeout:N];');
  const globalBox = settings[2] === undefined ? null : checkBox(settings.slice(2, 6).map(Number) as Box, 1);
  let body = text.slice(settings[0].length);
  let isIn: [number, number] | null = null;
  const isInMatch = new RegExp(String.raw`^is_in\((${NUM}),(${NUM})\)->\.covering;\s*`).exec(body);
  if (isInMatch) {
    isIn = [Number(isInMatch[1]), Number(isInMatch[2])];
    body = body.slice(isInMatch[0].length);
  }
  const statementPattern = String.raw`(?:nwr(?:${FILTER})+(?:${BOX})?|(?:way|rel)\(pivot\.covering\)(?:${FILTER})+);\s*`;
  const union = new RegExp(String.raw`^\(\s*((?:${statementPattern})+)\);\s*out body geom;$`).exec(body);
  if (!union) throw new QueryError('line 2: parse error: expected a union of nwr[...] statements followed by "out body geom;"');
  const statements = union[1]!.split(/;\s*/).map((st) => st.trim()).filter(Boolean).map((statement): Statement => {
    const pivot = statement.startsWith('way(pivot') ? 'way' : statement.startsWith('rel(pivot') ? 'relation' : null;
    if (pivot && !isIn) throw new QueryError('line 3: static error: pivot.covering is not set (no is_in before)');
    const box = new RegExp(`${BOX}$`).exec(statement);
    const own = box ? checkBox(box.slice(1, 5).map(Number) as Box, 3) : null;
    if (!pivot && !own && !globalBox) throw new QueryError('line 3: static error: a statement without a bbox would query the whole planet');
    return { filters: parseFilters(statement), box: pivot ? null : (own ?? globalBox), pivot };
  });
  return { statements, isIn };
}

export async function startOverpassDouble(osm: Pick<OsmApiDouble, 'visible' | 'element'>): Promise<OverpassDouble> {
  const queries: string[] = [];
  let refuse = 0;
  let remark = false;
  let hold = false;

  function answer(query: string): unknown {
    const { statements, isIn } = parseQuery(query);
    const node = (id: number) => osm.element('node', id);
    const insideOf = ([south, west, north, east]: Box) => (n: StoredElement) => n.lat! >= south && n.lat! <= north && n.lon! >= west && n.lon! <= east;
    const crosses = ([south, west, north, east]: Box, a: StoredElement, b: StoredElement) => {
      // A segment crossing the box: its bounding box overlaps and it is not entirely on one side of an edge.
      if (Math.max(a.lat!, b.lat!) < south || Math.min(a.lat!, b.lat!) > north || Math.max(a.lon!, b.lon!) < west || Math.min(a.lon!, b.lon!) > east) return false;
      const corners: [number, number][] = [[west, south], [east, south], [east, north], [west, north]];
      const side = (c: [number, number]) => Math.sign((b.lon! - a.lon!) * (c[1] - a.lat!) - (b.lat! - a.lat!) * (c[0] - a.lon!));
      const sides = new Set(corners.map(side));
      return sides.size > 1 || sides.has(0);
    };
    const wayInBox = (box: Box, w: StoredElement) => {
      const nodes = w.nodes!.map(node).filter((n): n is StoredElement => n !== undefined);
      return nodes.some(insideOf(box)) || nodes.some((n, i) => i > 0 && crosses(box, nodes[i - 1]!, n));
    };
    const inBox = (box: Box, e: StoredElement): boolean => {
      if (e.type === 'node') return insideOf(box)(e);
      if (e.type === 'way') return wayInBox(box, e);
      return e.members!.some((m) => {
        const member = osm.element(m.type, m.ref);
        return member?.visible === true && m.type !== 'relation' && inBox(box, member);
      });
    };
    // is_in: closed ways and multipolygon relations whose outer ring(s) contain the point (Overpass's areas).
    const ringContains = (ids: number[], lat: number, lon: number) => {
      const ring = ids.map(node).filter((n): n is StoredElement => n !== undefined);
      let inside = false;
      for (let i = 0, j = ring.length - 1; i < ring.length; j = i++) {
        const a = ring[i]!;
        const b = ring[j]!;
        if (a.lat! > lat !== b.lat! > lat && lon < ((b.lon! - a.lon!) * (lat - a.lat!)) / (b.lat! - a.lat!) + a.lon!) inside = !inside;
      }
      return inside;
    };
    const covers = (e: StoredElement): boolean => {
      if (!isIn) return false;
      const [lat, lon] = isIn;
      if (e.type === 'way') return e.nodes!.length > 3 && e.nodes![0] === e.nodes![e.nodes!.length - 1] && ringContains(e.nodes!, lat, lon);
      if (e.type === 'relation' && e.tags.type === 'multipolygon') {
        const outers = e.members!.filter((m) => m.type === 'way' && m.role === 'outer').map((m) => osm.element('way', m.ref)).filter((w): w is StoredElement => w?.visible === true);
        return outers.some((w) => w.nodes![0] === w.nodes![w.nodes!.length - 1] && ringContains(w.nodes!, lat, lon));
      }
      return false;
    };
    const selected = (e: StoredElement) => statements.some((st) => {
      if (!st.filters.every((f) => f.test(e.tags[f.key]))) return false;
      if (st.pivot) return st.pivot === e.type && covers(e);
      return inBox(st.box!, e);
    });
    const geometryOf = (w: StoredElement) => w.nodes!.map((id) => {
      const n = node(id);
      return n ? { lat: n.lat!, lon: n.lon! } : null;
    });
    const boundsOf = (points: { lat: number; lon: number }[]) => ({
      minlat: Math.min(...points.map((p) => p.lat)),
      minlon: Math.min(...points.map((p) => p.lon)),
      maxlat: Math.max(...points.map((p) => p.lat)),
      maxlon: Math.max(...points.map((p) => p.lon)),
    });
    const elements: unknown[] = [];
    for (const type of ['node', 'way', 'relation'] as ElementType[]) {
      for (const e of osm.visible(type)) {
        if (!selected(e)) continue;
        if (type === 'node') elements.push({ type, id: e.id, lat: e.lat, lon: e.lon, tags: e.tags });
        if (type === 'way') {
          const geometry = geometryOf(e);
          elements.push({ type, id: e.id, bounds: boundsOf(geometry.filter((p) => p !== null)), nodes: e.nodes, geometry, tags: e.tags });
        }
        if (type === 'relation') {
          const points: { lat: number; lon: number }[] = [];
          const members = e.members!.map((m) => {
            const member = osm.element(m.type, m.ref);
            if (m.type === 'node' && member?.visible) {
              points.push({ lat: member.lat!, lon: member.lon! });
              return { ...m, lat: member.lat, lon: member.lon };
            }
            if (m.type === 'way' && member?.visible) {
              const geometry = geometryOf(member);
              points.push(...geometry.filter((p): p is { lat: number; lon: number } => p !== null));
              return { ...m, geometry };
            }
            return { ...m };
          });
          elements.push({ type, id: e.id, ...(points.length > 0 ? { bounds: boundsOf(points) } : {}), members, tags: e.tags });
        }
      }
    }
    return {
      version: 0.6,
      generator: 'Overpass API 0.7.62.1 (double)',
      osm3s: { timestamp_osm_base: new Date().toISOString().replace(/\.\d+Z$/, 'Z'), copyright: 'The data included in this document is from www.openstreetmap.org. The data is made available under ODbL.' },
      elements,
    };
  }

  async function readBody(req: IncomingMessage): Promise<string> {
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of req as AsyncIterable<Buffer>) {
      size += chunk.length;
      if (size > 1024 * 1024) throw new QueryError('request too large');
      chunks.push(chunk);
    }
    return Buffer.concat(chunks).toString('utf8');
  }

  const html = (message: string) =>
    `<?xml version="1.0" encoding="UTF-8"?>\n<!DOCTYPE html><html><head><title>OSM3S Response</title></head><body>\n<p>The data included in this document is from www.openstreetmap.org. The data is made available under ODbL.</p>\n<p><strong style="color:#FF0000">Error</strong>: ${message.replace(/&/g, '&amp;').replace(/</g, '&lt;')} </p>\n</body></html>`;

  const server = createServer((req, res) => {
    void (async () => {
      const url = new URL(req.url ?? '/', 'http://double');
      if (url.pathname !== '/api/interpreter') {
        res.writeHead(404, { 'content-type': 'text/plain' }).end('not found');
        return;
      }
      let query: string | null = url.searchParams.get('data');
      try {
        if (req.method === 'POST') {
          const type = req.headers['content-type'] ?? '';
          const body = await readBody(req);
          // Overpass takes the query as form field `data`, or the raw body as the query itself.
          query = type.startsWith('application/x-www-form-urlencoded') ? new URLSearchParams(body).get('data') : body;
        } else if (req.method !== 'GET') {
          res.writeHead(405, { 'content-type': 'text/plain' }).end('GET or POST');
          return;
        }
        if (!req.headers['user-agent']) throw new QueryError('a User-Agent is required');
        if (!query) throw new QueryError('line 1: parse error: no query (expected the form field "data")');
        queries.push(query);
        if (hold) {
          hold = false;
          return;
        }
        if (refuse > 0) {
          refuse--;
          res.writeHead(429, { 'content-type': 'text/html; charset=utf-8' }).end(html('runtime error: open64: 0 Success /osm3s_osm_base Dispatcher_Client::request_read_and_idx::rate_limited. Please check /api/status for the quota of your IP address.'));
          return;
        }
        if (remark) {
          remark = false;
          res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ version: 0.6, generator: 'Overpass API (double)', osm3s: {}, elements: [], remark: 'runtime error: Query timed out in "query" at line 3 after 25 seconds.' }));
          return;
        }
        const body = JSON.stringify(answer(query));
        res.writeHead(200, { 'content-type': 'application/json' }).end(body);
      } catch (error) {
        if (error instanceof QueryError) res.writeHead(400, { 'content-type': 'text/html; charset=utf-8' }).end(html(error.message));
        else res.writeHead(500, { 'content-type': 'text/plain' }).end('internal error');
      }
    })();
  });
  const port = await listen(server, 0, '127.0.0.1');
  return {
    url: `http://127.0.0.1:${port}`,
    queries,
    tooManyRequests: (times = 1) => {
      refuse = times;
    },
    runtimeError: () => {
      remark = true;
    },
    holdNext: () => {
      hold = true;
    },
    close: () => closeGracefully(server, 1000),
  };
}
