import type { WikibaseCandidate } from '../../../../shared/conflation.js';
import type { Decider } from './osm.js';

/**
 * Conflation for Wikidata / Wikibase: before a feature's first item is created, look for an item that
 * already is that object — one carrying the OSM link (P402 = the relation the OSM export linked to,
 * or the item named in the linked element's `wikidata` tag), or one with a coordinate (P625) within
 * WIKIBASE_CONFLATION_RADIUS_M, an instance of (P31) the category's class, and a similar label.
 * WIKIBASE_CONFLATION_RADIUS_M, an instance of (P31) the category's class or a subclass of it (P279),
 * and a similar label. Only the OSM link links automatically; an item found by label and place is
 * asked about (create / link via OSM / needs_decision).
 */
export type { WikibaseCandidate };

export type WikibaseConflationDecision =
  | { outcome: 'create'; reason: string; candidates: WikibaseCandidate[]; decidedBy: Decider | null }
  | { outcome: 'link'; itemId: string; reason: string; candidates: WikibaseCandidate[]; decidedBy: Decider | null }
  | { outcome: 'needs_decision'; reason: string; candidates: WikibaseCandidate[] };

export function decideWikibase(candidates: WikibaseCandidate[]): WikibaseConflationDecision {
  const sorted = [...candidates].sort((a, b) => Number(b.viaOsmLink) - Number(a.viaOsmLink) || (b.nameSimilarity ?? 0) - (a.nameSimilarity ?? 0));
  if (sorted.length === 0) return { outcome: 'create', reason: 'no item of this class nearby and none linked from OSM', candidates: sorted, decidedBy: null };
  const strong = sorted.filter((c) => c.strength === 'strong');
  const linked = sorted.filter((c) => c.viaOsmLink);
  // The OSM link names the item outright; it wins over nearby look-alikes.
  if (linked.length === 1) return { outcome: 'link', itemId: linked[0]!.itemId, reason: `linked from OSM: ${linked[0]!.itemId}`, candidates: sorted, decidedBy: null };
  // Found by label and place alone: a reviewer confirms before the platform edits someone's item (a
  // false link would get our statements and references).
  if (sorted.length === 1 && strong.length === 1) {
    const c = strong[0]!;
    return { outcome: 'needs_decision', reason: `one strong candidate found by label and place: ${c.itemId} "${c.label ?? ''}" (name similarity ${c.nameSimilarity}, ${c.distanceM} m away); a reviewer confirms the link`, candidates: sorted };
  }
  return { outcome: 'needs_decision', reason: sorted.length > 1 ? `${sorted.length} candidate items` : 'one weak candidate item', candidates: sorted };
}
