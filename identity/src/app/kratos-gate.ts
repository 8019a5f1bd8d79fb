import express, { type RequestHandler, type Router } from 'express';

/**
 * The gate in front of Kratos' public self-service submissions. Every request that may carry a
 * password or a code (a POST under /self-service/: login, registration, recovery, verification and
 * settings, for browser and API flows alike) reaches Kratos only through here: the proxy sends those to
 * `<login app>/kratos-gate/<the original path and query>` (infra/caddy.ts, `ProxyRoute.gate`), and
 * this router applies the login app's own limiters (one budget with the login page's: per client
 * address, and failed attempts per account) before passing the request on to Kratos unchanged.
 *
 * Kratos answers as it would directly (status, body, every Set-Cookie, its redirects); only hop-by-hop
 * headers are dropped, and a body is at most GATE_BODY_LIMIT (Kratos' own forms are a few hundred
 * bytes; a WebAuthn assertion a few KiB). The limiters see only the identifier, never the secret.
 */

export const GATE_PREFIX = '/kratos-gate';
/** What the proxy sends through the gate: every POST below this path of Kratos' public API. */
export const GATED_PATH = '/self-service/';
const GATE_BODY_LIMIT = '64kb';
/** The raw body beside the request (req.body holds only the identifier once the limiters run). */
const rawBodies = new WeakMap<object, Buffer>();
const UPSTREAM_TIMEOUT_MS = 10_000;

/** Request headers Kratos reads from a browser or an app; nothing else is passed on. */
const FORWARDED_REQUEST_HEADERS = ['accept', 'accept-language', 'content-type', 'cookie', 'origin', 'referer', 'user-agent', 'x-csrf-token', 'x-session-token', 'x-forwarded-proto', 'x-forwarded-host'];
/** Response headers that describe this connection or the encoding fetch already undid. */
const DROPPED_RESPONSE_HEADERS = new Set(['connection', 'keep-alive', 'transfer-encoding', 'content-encoding', 'content-length', 'set-cookie']);

/** What the limiters look at: the account a login names (`identifier`), from a form or a JSON body. */
function identifierOf(body: Buffer, contentType: string | undefined): string {
  const type = (contentType ?? '').split(';')[0]!.trim().toLowerCase();
  const text = body.toString('utf8');
  if (type === 'application/x-www-form-urlencoded') return new URLSearchParams(text).get('identifier') ?? '';
  if (type === 'application/json') {
    try {
      const parsed = JSON.parse(text) as unknown;
      const identifier = parsed && typeof parsed === 'object' ? (parsed as Record<string, unknown>).identifier : undefined;
      return typeof identifier === 'string' ? identifier : '';
    } catch {
      return ''; // Kratos answers the malformed body itself; the request still counts per address
    }
  }
  return '';
}

/**
 * A login that failed: an API flow answers 400; a browser flow redirects (303) back to the login page
 * with the flow (`?flow=`), while a successful one redirects onwards to the return URL.
 */
export function loginFailed(status: number, location: string | undefined): boolean {
  if (status >= 400) return true;
  return status === 303 && location !== undefined && /[?&]flow=/.test(location);
}

export function createKratosGate(options: { kratosPublicUrl: string; limiters: RequestHandler[] }): Router {
  const router = express.Router();
  const base = options.kratosPublicUrl.replace(/\/+$/, '');
  router.post(`${GATED_PATH}*rest`, express.raw({ type: () => true, limit: GATE_BODY_LIMIT }), (req, res, next) => {
    // Only a path in plain form goes on: an encoded or dot segment could resolve to another Kratos path.
    const path = req.originalUrl.slice(GATE_PREFIX.length).split('?')[0]!;
    if (!path.startsWith(GATED_PATH) || /[%;\\]|\/\/|\/\.\.?(\/|$)/.test(path)) {
      res.status(400).type('text/plain').send('Bad Request: the path must be in plain form');
      return;
    }
    const raw = Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0);
    rawBodies.set(req, raw);
    // Only the identifier is left for the limiters (createLoginRateLimiters reads req.body.identifier).
    req.body = { identifier: identifierOf(raw, req.get('content-type')) };
    next();
  }, ...options.limiters, async (req, res, next) => {
    const raw = rawBodies.get(req) ?? Buffer.alloc(0);
    const headers: Record<string, string> = {};
    for (const name of FORWARDED_REQUEST_HEADERS) {
      const value = req.get(name);
      if (value !== undefined) headers[name] = value;
    }
    headers['x-forwarded-for'] = req.ip ?? '';
    try {
      const upstream = await fetch(`${base}${req.originalUrl.slice(GATE_PREFIX.length)}`, {
        method: 'POST',
        headers,
        body: raw,
        redirect: 'manual',
        signal: AbortSignal.timeout(UPSTREAM_TIMEOUT_MS),
      });
      res.status(upstream.status);
      upstream.headers.forEach((value, name) => {
        if (!DROPPED_RESPONSE_HEADERS.has(name)) res.setHeader(name, value);
      });
      const cookies = upstream.headers.getSetCookie();
      if (cookies.length) res.setHeader('set-cookie', cookies);
      res.send(Buffer.from(await upstream.arrayBuffer()));
    } catch (error) {
      next(error);
    }
  });
  return router;
}
