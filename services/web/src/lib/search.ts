import type { Feature } from './types.js';

/**
 * Searching the whole dataset by name and address, through the API's OGC API Features endpoint: its
 * CQL2 `filter` with a case-insensitive LIKE (`CASEI`, the case-insensitive comparison class) and its
 * cursor (`next` links), so "aLTer" finds "Alter Friedhof" like "alter" does.
 */

/** A CQL2 string literal of a LIKE pattern matching the text anywhere: quotes doubled, wildcards escaped. */
const containing = (text: string) => `'%${text.replace(/[\\%_]/g, (c) => `\\${c}`).replace(/'/g, "''")}%'`;

/** The CQL2 text filter finding the search text in the name or the address; undefined for no text. */
export function searchFilter(query: string): string | undefined {
  const text = query.trim();
  if (!text) return undefined;
  return ['name', 'adresse'].map((property) => `CASEI(${property}) LIKE CASEI(${containing(text)})`).join(' OR ');
}

/** The OGC API items path of a search page: text, kategorie and status filters, page size, cursor. */
export function searchPath(options: { q?: string; kategorie?: string; status?: string; limit: number; cursor?: string | undefined; bbox?: string }): string {
  const params = new URLSearchParams({ limit: String(options.limit) });
  const filter = searchFilter(options.q ?? '');
  if (filter) params.set('filter', filter);
  if (options.kategorie) params.set('kategorie', options.kategorie);
  if (options.status) params.set('status', options.status);
  if (options.bbox) params.set('bbox', options.bbox);
  if (options.cursor) params.set('cursor', options.cursor);
  return `/ogcapi/collections/features/items?${params.toString()}`;
}

export interface SearchPage {
  features: Feature[];
  /** The cursor of the next page, from the API's `next` link; undefined on the last page. */
  next: string | undefined;
}

/** A page of the API's answer, with the next page's cursor taken from its `next` link. */
export function readSearchPage(body: { features: Feature[]; links?: Array<{ rel: string; href: string }> }): SearchPage {
  const next = body.links?.find((link) => link.rel === 'next')?.href;
  return { features: body.features, next: next ? (new URL(next, 'http://api.invalid').searchParams.get('cursor') ?? undefined) : undefined };
}
