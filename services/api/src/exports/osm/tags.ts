import { addressTags } from '../address.js';
import type { CategoryRule, FeatureSnapshot } from '../types.js';
import type { OsmTags } from './model.js';

/** The tags the platform sets on the element that represents a feature (the "root"). */
export function featureTags(snapshot: FeatureSnapshot, rule: CategoryRule, asMultipolygon: boolean): OsmTags {
  const tags: OsmTags = { ...rule.osmTags, name: snapshot.name.trim() };
  Object.assign(tags, addressTags(snapshot.adresse));
  const phone = snapshot.telefon?.trim();
  if (phone) tags.phone = phone;
  if (asMultipolygon) tags.type = 'multipolygon';
  return tags;
}

/**
 * Tags for a re-export: our tags win for the keys we manage (category keys, name, phone, every addr:*
 * key), a managed key we no longer set is removed, and every other tag someone added on OSM is kept.
 */
export function mergeTags(existing: OsmTags, ours: OsmTags, managedKeys: ReadonlySet<string>): OsmTags {
  const merged: OsmTags = {};
  for (const [k, v] of Object.entries(existing)) {
    if (!managedKeys.has(k) && !k.startsWith('addr:')) merged[k] = v;
  }
  return { ...merged, ...ours };
}

export function sameTags(a: OsmTags, b: OsmTags): boolean {
  const keys = Object.keys(a);
  return keys.length === Object.keys(b).length && keys.every((k) => b[k] === a[k]);
}

/**
 * Tags for an element that existed before the platform linked to it: a key the element lacks is
 * added (and from then on owned by the platform); a key we own is updated or, when we no longer set
 * it, removed; every other value stays exactly as the community left it, even where ours differs.
 */
export function linkedTags(existing: OsmTags, ours: OsmTags, owned: ReadonlySet<string>): { tags: OsmTags; ownedKeys: string[] } {
  const tags: OsmTags = { ...existing };
  const ownedKeys: string[] = [];
  for (const key of owned) if (!(key in ours)) delete tags[key];
  for (const [key, value] of Object.entries(ours)) {
    if (owned.has(key) || !(key in existing)) {
      tags[key] = value;
      ownedKeys.push(key);
    }
  }
  return { tags, ownedKeys: ownedKeys.sort() };
}
