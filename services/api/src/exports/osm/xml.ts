import { XMLBuilder, XMLParser } from 'fast-xml-parser';
import type { DiffResultEntry, OsmChange, OsmElement, OsmMember, OsmTags, OsmType } from './model.js';

const GENERATOR = 'feature-mapping-platform';
const REPEATED = new Set(['node', 'way', 'relation', 'tag', 'nd', 'member', 'create', 'modify', 'delete', 'changeset']);

const parser = new XMLParser({
  ignoreAttributes: false,
  attributeNamePrefix: '',
  parseAttributeValue: false,
  parseTagValue: false,
  isArray: (name, _path, _leaf, isAttribute) => !isAttribute && REPEATED.has(name),
});

const builder = new XMLBuilder({
  ignoreAttributes: false,
  attributeNamePrefix: '@_',
  format: true,
  suppressEmptyNode: true,
  // Otherwise if-unused="true" would be written as a bare attribute, which is not XML.
  suppressBooleanAttributes: false,
  processEntities: true,
});

type Attrs = Record<string, unknown>;

function tagsToXml(tags: OsmTags): Attrs[] {
  return Object.keys(tags)
    .sort()
    .map((k) => ({ '@_k': k, '@_v': tags[k] }));
}

function elementToXml(element: OsmElement, changesetId: number, withVersion: boolean): Attrs {
  const base: Attrs = { '@_id': element.id, '@_changeset': changesetId };
  if (withVersion) {
    if (element.version === undefined) throw new Error(`${element.type} ${element.id} needs its current version`);
    base['@_version'] = element.version;
  }
  switch (element.type) {
    case 'node':
      return { ...base, '@_lat': element.lat.toFixed(7), '@_lon': element.lon.toFixed(7), tag: tagsToXml(element.tags) };
    case 'way':
      return { ...base, nd: element.nodeRefs.map((ref) => ({ '@_ref': ref })), tag: tagsToXml(element.tags) };
    case 'relation':
      return {
        ...base,
        member: element.members.map((m) => ({ '@_type': m.type, '@_ref': m.ref, '@_role': m.role })),
        tag: tagsToXml(element.tags),
      };
  }
}

function block(elements: OsmElement[], changesetId: number, withVersion: boolean, order: OsmType[]): Attrs {
  const out: Attrs = {};
  for (const type of order) {
    const ofType = elements.filter((e) => e.type === type);
    if (ofType.length > 0) out[type] = ofType.map((e) => elementToXml(e, changesetId, withVersion));
  }
  return out;
}

const CREATE_ORDER: OsmType[] = ['node', 'way', 'relation'];
const DELETE_ORDER: OsmType[] = ['relation', 'way', 'node'];

/** Serialise an osmChange for `POST /api/0.6/changeset/#id/upload`; every element carries the changeset id. */
export function serializeOsmChange(change: OsmChange, changesetId: number): string {
  const doc: Attrs = { '@_version': '0.6', '@_generator': GENERATOR };
  if (change.create.length > 0) doc.create = block(change.create, changesetId, false, CREATE_ORDER);
  if (change.modify.length > 0) doc.modify = block(change.modify, changesetId, true, CREATE_ORDER);
  const deletes: Attrs[] = [];
  if (change.delete.length > 0) deletes.push(block(change.delete, changesetId, true, DELETE_ORDER));
  if (change.deleteIfUnused.length > 0) {
    deletes.push({ '@_if-unused': 'true', ...block(change.deleteIfUnused, changesetId, true, DELETE_ORDER) });
  }
  if (deletes.length > 0) doc.delete = deletes;
  return `<?xml version="1.0" encoding="UTF-8"?>\n${builder.build({ osmChange: doc }) as string}`;
}

/** The body of `PUT /api/0.6/changeset/create`. */
export function serializeChangesetCreate(tags: OsmTags): string {
  const doc = { osm: { changeset: { tag: tagsToXml(tags) } } };
  return `<?xml version="1.0" encoding="UTF-8"?>\n${builder.build(doc) as string}`;
}

function toInt(value: unknown, what: string): number {
  const n = Number(value);
  if (!Number.isSafeInteger(n)) throw new Error(`malformed OSM XML: ${what} is ${String(value)}`);
  return n;
}

function parseTags(raw: Attrs): OsmTags {
  const tags: OsmTags = {};
  for (const t of (raw.tag as Attrs[] | undefined) ?? []) tags[String(t.k)] = String(t.v);
  return tags;
}

function parseElement(type: OsmType, raw: Attrs): OsmElement {
  const id = toInt(raw.id, `${type} id`);
  const version = raw.version === undefined ? undefined : toInt(raw.version, `${type} ${id} version`);
  const changeset = raw.changeset === undefined ? undefined : toInt(raw.changeset, `${type} ${id} changeset`);
  const common = { id, tags: parseTags(raw), ...(version === undefined ? {} : { version }), ...(changeset === undefined ? {} : { changeset }) };
  switch (type) {
    case 'node':
      return { type, ...common, lat: Number(raw.lat), lon: Number(raw.lon) };
    case 'way':
      return { type, ...common, nodeRefs: ((raw.nd as Attrs[] | undefined) ?? []).map((nd) => toInt(nd.ref, 'nd ref')) };
    case 'relation':
      return {
        type,
        ...common,
        members: ((raw.member as Attrs[] | undefined) ?? []).map(
          (m): OsmMember => ({ type: String(m.type) as OsmType, ref: toInt(m.ref, 'member ref'), role: String(m.role ?? '') }),
        ),
      };
  }
}

function elementsOf(container: Attrs | undefined): OsmElement[] {
  if (!container) return [];
  const out: OsmElement[] = [];
  for (const type of CREATE_ORDER) for (const raw of (container[type] as Attrs[] | undefined) ?? []) out.push(parseElement(type, raw));
  return out;
}

function parseRoot(xml: string, rootName: string): Attrs {
  const doc = parser.parse(xml) as Attrs;
  const root = doc[rootName];
  if (root === undefined) throw new Error(`malformed OSM XML: no <${rootName}> element`);
  return (root === '' ? {} : root) as Attrs;
}

/** The elements of an `<osm>` document (GET /node/#id, /way/#id/full, /relation/#id/full). */
export function parseOsmDocument(xml: string): OsmElement[] {
  return elementsOf(parseRoot(xml, 'osm'));
}

/** An `<osmChange>` document (GET /changeset/#id/download), grouped by action. */
export function parseOsmChangeDocument(xml: string): { create: OsmElement[]; modify: OsmElement[]; delete: OsmElement[] } {
  const root = parseRoot(xml, 'osmChange');
  const group = (action: string) => ((root[action] as Attrs[] | undefined) ?? []).flatMap((b) => elementsOf(b));
  return { create: group('create'), modify: group('modify'), delete: group('delete') };
}

export function parseDiffResult(xml: string): DiffResultEntry[] {
  const root = parseRoot(xml, 'diffResult');
  const entries: DiffResultEntry[] = [];
  for (const type of CREATE_ORDER) {
    for (const raw of (root[type] as Attrs[] | undefined) ?? []) {
      const entry: DiffResultEntry = { type, oldId: toInt(raw.old_id, 'old_id') };
      if (raw.new_id !== undefined) entry.newId = toInt(raw.new_id, 'new_id');
      if (raw.new_version !== undefined) entry.newVersion = toInt(raw.new_version, 'new_version');
      entries.push(entry);
    }
  }
  return entries;
}

export interface ChangesetInfo {
  id: number;
  open: boolean;
  uid: number | undefined;
  tags: OsmTags;
}

export function parseChangesetDocument(xml: string): ChangesetInfo {
  const changeset = (parseRoot(xml, 'osm').changeset as Attrs[] | undefined)?.[0];
  if (!changeset) throw new Error('malformed OSM XML: no <changeset>');
  return {
    id: toInt(changeset.id, 'changeset id'),
    open: changeset.open === 'true',
    uid: changeset.uid === undefined ? undefined : toInt(changeset.uid, 'uid'),
    tags: parseTags(changeset),
  };
}
