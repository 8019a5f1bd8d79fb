import { addressTags } from '../address.js';
import type { CategoryRule, FeatureGeometry, FeatureSnapshot } from '../types.js';
import type { OsmTags } from './model.js';
import { normaliseNameCase, normalisePhones, normaliseStreet } from './values.js';

/** What a geometry becomes on OSM, for the question which tags are valid on it. */
export type GeometryKind = 'point' | 'line' | 'area';

export function geometryKindOf(geometry: FeatureGeometry): GeometryKind {
  return geometry.type === 'Point' ? 'point' : geometry.type === 'LineString' ? 'line' : 'area';
}

/**
 * Keys that describe an area and are wrong on a node or an open way (the OSM wiki's "on nodes: no,
 * on ways: closed only"): `landuse=cemetery` on a node or on an open way is a validator error.
 */
const AREA_ONLY: Record<string, readonly string[] | '*'> = {
  landuse: '*',
  area: '*',
  amenity: ['grave_yard', 'parking'],
  leisure: ['park', 'garden'],
  building: '*',
};
const LINE_FORBIDDEN_ALSO: Record<string, readonly string[] | '*'> = { historic: ['memorial', 'monument'] };

const hits = (tags: OsmTags, rules: Record<string, readonly string[] | '*'>) =>
  Object.entries(tags).filter(([k, v]) => {
    const rule = rules[k];
    return rule !== undefined && (rule === '*' || rule.includes(v));
  });

/**
 * The tags of `tags` that are not valid on the kind (empty: valid). Points may carry grave_yard.
 * `strict` (the area tags tried on a line for want of line tags) also refuses what is a point or an
 * area but hardly a line (historic=memorial without memorial=wall).
 */
export function invalidTagsFor(tags: OsmTags, kind: GeometryKind, strict = false): string[] {
  if (kind === 'area') return [];
  const pointOk = (k: string, v: string) => kind === 'point' && k === 'amenity' && v === 'grave_yard';
  const bad = hits(tags, AREA_ONLY).filter(([k, v]) => !pointOk(k, v));
  if (kind === 'line' && strict) bad.push(...hits(tags, LINE_FORBIDDEN_ALSO));
  return bad.map(([k, v]) => `${k}=${v}`);
}

/**
 * The category tags for a geometry kind: areas take `osmTags`; points and open ways take their own
 * (`pointTags`, `lineTags`, config/osm-tags.yaml `point:` / `line:`), else `osmTags` when those are
 * valid there. null: the category has no valid tagging for this kind, and a reviewer must be asked.
 */
export function categoryTagsFor(rule: Pick<CategoryRule, 'osmTags' | 'pointTags' | 'lineTags'>, kind: GeometryKind): OsmTags | null {
  const own = kind === 'point' ? rule.pointTags : kind === 'line' ? rule.lineTags : rule.osmTags;
  if (own === null) return null;
  const tags = own ?? rule.osmTags;
  return invalidTagsFor(tags, kind, own === undefined).length === 0 ? tags : null;
}

/**
 * The tags the platform sets on the element that represents a feature (the "root"), with values as
 * OSM writes them (values.ts): the street's abbreviation written out, the phone international, a
 * name in capitals in title case when that is safe.
 */
export function featureTags(snapshot: FeatureSnapshot, categoryTags: OsmTags, asMultipolygon: boolean): OsmTags {
  const tags: OsmTags = { ...categoryTags, name: normaliseNameCase(snapshot.name) };
  const address = addressTags(snapshot.adresse);
  if (address['addr:street']) address['addr:street'] = normaliseStreet(address['addr:street']);
  Object.assign(tags, address);
  const phone = snapshot.telefon?.trim();
  if (phone) tags.phone = normalisePhones(phone);
  if (asMultipolygon) tags.type = 'multipolygon';
  return tags;
}

export function sameTags(a: OsmTags, b: OsmTags): boolean {
  const keys = Object.keys(a);
  return keys.length === Object.keys(b).length && keys.every((k) => b[k] === a[k]);
}

/** A value someone else set that the merge kept although we wanted another. */
export interface KeptValue {
  key: string;
  ours: string | null;
  theirs: string | null;
}

export interface MergedTags {
  tags: OsmTags;
  /** The values of ours the element carries after the merge: the base of the next merge. */
  written: OsmTags;
  kept: KeptValue[];
}

/**
 * The three-way tag merge of a re-export. `base` is what the platform wrote at its last export
 * (null: not known, an export record of an earlier release), `current` what OSM has now, `wanted`
 * what the approved version asks for. Per key of base or wanted:
 *
 *   current = wanted                   → nothing to do
 *   current = base (nobody touched it) → wanted is written (a key we no longer want is removed)
 *   otherwise (someone changed, added or removed it since) → their value stays, reported as kept
 *
 * With an unknown base only missing keys are added. Keys neither we wrote nor want (every other
 * tag, `addr:suburb` included) are never touched.
 */
export function threeWayTags(base: OsmTags | null, current: OsmTags, wanted: OsmTags): MergedTags {
  const tags: OsmTags = { ...current };
  const kept: KeptValue[] = [];
  const keys = new Set([...Object.keys(base ?? {}), ...Object.keys(wanted)]);
  for (const key of [...keys].sort()) {
    const w = wanted[key];
    const c = current[key];
    if (w === c) continue;
    const untouched = base !== null && c === base[key];
    const free = base === null && c === undefined;
    if (untouched || free) {
      if (w === undefined) delete tags[key];
      else tags[key] = w;
    } else if (w !== undefined) {
      kept.push({ key, ours: w, theirs: c ?? null });
    }
  }
  const written: OsmTags = {};
  for (const [k, v] of Object.entries(wanted)) if (tags[k] === v) written[k] = v;
  return { tags, written, kept };
}
