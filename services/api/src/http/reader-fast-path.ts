import type { IncomingMessage } from 'node:http';
import type { Authenticator } from '../../../shared/principal.js';
import { can } from '../auth/permissions.js';
import { simpleRequestCorsHeaders } from './cors.js';

/** What a read-only path answered before Express needs to treat its caller as the /api routes do. */
export interface ReaderFastPathOptions {
  /** The same authenticator the /api routes use (recording callers), so a caller is treated alike. */
  authenticator: Authenticator;
  /** CORS_ORIGINS, normalised (http/cors.ts allowedOrigins). */
  allowedOrigins: ReadonlySet<string>;
}

/**
 * The part the read-only fast paths (features/read-fast-path.ts, tiles/fast-path.ts) share: the caller
 * authenticated and holding `read`, then `serve` with the headers Express' middleware puts on every
 * answer (nosniff, CORS for a simple request). A caller without `read`, or any failure before `serve`
 * writes, goes to Express untouched (`fallback`), which answers as it always does.
 */
export function answerReader(options: ReaderFastPathOptions, req: IncomingMessage, fallback: () => void, serve: (headers: Record<string, string>) => Promise<void>): void {
  options.authenticator
    .authenticate(req)
    .then(async (principal) => {
      if (!can(principal, 'read')) return fallback();
      await serve({ 'X-Content-Type-Options': 'nosniff', ...simpleRequestCorsHeaders(options.allowedOrigins, req.headers.origin) });
    })
    .catch(() => fallback());
}
