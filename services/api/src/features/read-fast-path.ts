import type { IncomingMessage } from 'node:http';
import { answerReader, type ReaderFastPathOptions } from '../http/reader-fast-path.js';
import { etagOf, type FeatureService } from './service.js';
import type { FastPath } from '../../../shared/http-server.js';

/**
 * GET /api/features/{id} answered without Express, for the one case that is most of the traffic: a
 * feature that exists, read by a caller allowed to read it.
 *
 * Why: Express costs more CPU per request than everything else on this path together (it swaps the
 * prototypes of Node's request and response, which slows Node's own HTTP code, and walks every
 * router layer). Measured on a single-feature GET it was more than half of the API's CPU per request
 * (bench/api.bench.ts).
 *
 * Invariant: this path writes nothing but the 200 answer Express would write, byte for byte apart from
 * header order: the same status, body and headers (nosniff, CORS via the same origin set, ETag,
 * Cache-Control, Content-Type, Content-Length). Every other outcome — a path or method it does not
 * take, a conditional request (Express answers 304 itself), credentials that fail, a caller lacking
 * `read`, an unknown id, a database error — is handed to Express untouched (`fallback`), which then
 * does everything itself, including its problem+json answer. test/feature-read-fast-path.test.ts
 * compares both for each of these cases.
 */

const PREFIX = '/api/features/';
const MAX_ID_LENGTH = 255;

export interface FeatureReadFastPathOptions extends ReaderFastPathOptions {
  service: FeatureService;
}

export function featureReadFastPath(options: FeatureReadFastPathOptions): FastPath {
  const { service } = options;
  return (req, res, fallback) => {
    const id = readableFeatureId(req);
    if (id === undefined) return fallback();
    answerReader(options, req, fallback, async (readerHeaders) => {
      const feature = await service.get(id);
      res.writeHead(200, {
        ...readerHeaders,
        ETag: etagOf(feature.version),
        'Cache-Control': 'no-cache',
        'Content-Type': 'application/geo+json; charset=utf-8',
        'Content-Length': Buffer.byteLength(feature.json),
      });
      res.end(feature.json);
    });
  };
}

/**
 * The id of a plain `GET /api/features/{id}` this path may answer, else undefined. Conservative: a
 * path Express would match differently (other letter case, a trailing slash, a further segment), a
 * %-escape Express would refuse, or a conditional request is left to Express.
 */
function readableFeatureId(req: IncomingMessage): string | undefined {
  if (req.method !== 'GET') return undefined;
  const url = req.url ?? '';
  if (!url.startsWith(PREFIX)) return undefined;
  const queryAt = url.indexOf('?');
  const raw = url.slice(PREFIX.length, queryAt === -1 ? url.length : queryAt);
  if (raw.length === 0 || raw.includes('/')) return undefined;
  if (req.headers['if-none-match'] !== undefined || req.headers['if-modified-since'] !== undefined) return undefined;
  let id: string;
  try {
    id = decodeURIComponent(raw);
  } catch {
    return undefined;
  }
  if (id.length === 0 || id.length > MAX_ID_LENGTH || id.includes('\u0000')) return undefined;
  return id;
}
