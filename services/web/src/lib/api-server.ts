import type { AstroGlobal } from 'astro';
import { DEV_TOKEN_COOKIE } from './session.js';
import type { Feature, HistoryEntry } from './types.js';

/**
 * The API as server-rendered pages call it: as the visitor (their development token, or their Kratos
 * cookies forwarded), so a page never shows more than the visitor may read.
 */
function credentials(astro: Pick<AstroGlobal, 'locals' | 'request' | 'cookies'>): Record<string, string> {
  const token = astro.locals.user?.token ?? astro.cookies.get(DEV_TOKEN_COOKIE)?.value;
  if (astro.locals.user?.token && token) return { authorization: `Bearer ${token}` };
  const cookie = astro.request.headers.get('cookie');
  return cookie && astro.locals.config.kratosPublicUrl ? { cookie } : {};
}

export async function getJson<T>(astro: Pick<AstroGlobal, 'locals' | 'request' | 'cookies'>, path: string): Promise<{ status: number; body: T | undefined; etag: string | null }> {
  const response = await fetch(`${astro.locals.config.apiUrl}${path}`, { headers: { accept: 'application/json', ...credentials(astro) } });
  const body = response.ok ? ((await response.json()) as T) : undefined;
  if (!response.ok) await response.body?.cancel();
  return { status: response.status, body, etag: response.headers.get('etag') };
}

export const fetchFeature = (astro: AstroGlobal, id: string) => getJson<Feature>(astro, `/api/features/${encodeURIComponent(id)}`);
export const fetchHistory = (astro: AstroGlobal, id: string) => getJson<{ versions: HistoryEntry[] }>(astro, `/api/features/${encodeURIComponent(id)}/history`);
