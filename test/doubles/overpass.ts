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
import type { ElementType, OsmApiDouble, StoredElement } from './osm-api.js';

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

const unescape = (s: string) => s.replace(/\\(["\\])/g, '$1');

function parseQuery(query: string): { bbox: [number, number, number, number]; statements: Filter[][] } {
  const text = query.trim();
  const settings = /^\[out:json\](?:\[timeout:(\d+)\])?\[bbox:(-?[\d.]+),(-?[\d.]+),(-?[\d.]+),(-?[\d.]+)\];\s*/.exec(text);
  if (!settings) throw new QueryError('line 1: parse error: expected [out:json][timeout:N][bbox:s,w,n,e]; (this double needs all three settings)');
  const bbox = settings.slice(2, 6).map(Number) as [number, number, number, number];
  if (bbox[0] > bbox[2] || bbox[1] > bbox[3] || Math.abs(bbox[0]) > 90 || Math.abs(bbox[2]) > 90) throw new QueryError('line 1: static error: the bbox must be south,west,north,east with south <= north');
  const body = text.slice(settings[0].length);
  const union = /^\(\s*((?:nwr(?:\["(?:[^"\\]|\\.)*"(?:=|~)"(?:[^"\\]|\\.)*"\])+;\s*)+)\);\s*out body geom;$/.exec(body);
  if (!union) throw new QueryError('line 2: parse error: expected a union of nwr[...] statements followed by "out body geom;"');
  const statements = union[1]!.split(';').map((s) => s.trim()).filter(Boolean).map((statement) => {
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
  });
  return { bbox, statements };
}

export async function startOverpassDouble(osm: Pick<OsmApiDouble, 'visible' | 'element'>): Promise<OverpassDouble> {
  const queries: string[] = [];
  let refuse = 0;
  let remark = false;
  let hold = false;

  function answer(query: string): unknown {
    const { bbox, statements } = parseQuery(query);
    const [south, west, north, east] = bbox;
    const inside = (n: StoredElement) => n.lat! >= south && n.lat! <= north && n.lon! >= west && n.lon! <= east;
    const node = (id: number) => osm.element('node', id);
    const crosses = (a: StoredElement, b: StoredElement) => {
      // A segment crossing the box: its bounding box overlaps and it is not entirely on one side of an edge.
      if (Math.max(a.lat!, b.lat!) < south || Math.min(a.lat!, b.lat!) > north || Math.max(a.lon!, b.lon!) < west || Math.min(a.lon!, b.lon!) > east) return false;
      const corners: [number, number][] = [[west, south], [east, south], [east, north], [west, north]];
      const side = (c: [number, number]) => Math.sign((b.lon! - a.lon!) * (c[1] - a.lat!) - (b.lat! - a.lat!) * (c[0] - a.lon!));
      const sides = new Set(corners.map(side));
      return sides.size > 1 || sides.has(0);
    };
    const wayInBox = (w: StoredElement) => {
      const nodes = w.nodes!.map(node).filter((n): n is StoredElement => n !== undefined);
      return nodes.some(inside) || nodes.some((n, i) => i > 0 && crosses(nodes[i - 1]!, n));
    };
    const matches = (e: StoredElement) => statements.some((filters) => filters.every((f) => f.test(e.tags[f.key])));
    const inBox = (e: StoredElement): boolean => {
      if (e.type === 'node') return inside(e);
      if (e.type === 'way') return wayInBox(e);
      return e.members!.some((m) => {
        const member = osm.element(m.type, m.ref);
        return member?.visible === true && m.type !== 'relation' && inBox(member);
      });
    };
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
        if (!matches(e) || !inBox(e)) continue;
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
