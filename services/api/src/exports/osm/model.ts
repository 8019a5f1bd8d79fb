/**
 * The OSM data model as the exporter uses it (API 0.6). Placeholder ids of elements to be created are
 * negative; the server answers with the real ids in its diffResult.
 */
export type OsmType = 'node' | 'way' | 'relation';
export type OsmTags = Record<string, string>;

export interface OsmNode {
  type: 'node';
  id: number;
  version?: number;
  /** The changeset of the element's last edit, as read from OSM (absent in plans). */
  changeset?: number;
  lat: number;
  lon: number;
  tags: OsmTags;
}
export interface OsmWay {
  type: 'way';
  id: number;
  version?: number;
  changeset?: number;
  nodeRefs: number[];
  tags: OsmTags;
}
export interface OsmMember {
  type: OsmType;
  ref: number;
  role: string;
}
export interface OsmRelation {
  type: 'relation';
  id: number;
  version?: number;
  changeset?: number;
  members: OsmMember[];
  tags: OsmTags;
}
export type OsmElement = OsmNode | OsmWay | OsmRelation;

/**
 * One osmChange upload. Serialised in this order, which the server applies top to bottom:
 * create (nodes, ways, relations) → modify → delete → delete if-unused (relations, ways, nodes), so
 * placeholders exist before they are referenced and an element is unreferenced before it is deleted.
 */
export interface OsmChange {
  create: OsmElement[];
  modify: OsmElement[];
  /** Deleted unconditionally: a reference from someone else's element makes the upload fail (412). */
  delete: OsmElement[];
  /** Deleted only if nothing else uses them (the `if-unused` attribute); otherwise silently kept. */
  deleteIfUnused: OsmElement[];
}

export interface DiffResultEntry {
  type: OsmType;
  oldId: number;
  /** Absent for deletions. */
  newId?: number;
  newVersion?: number;
}

export const elementKey = (type: OsmType, id: number): string => `${type}/${id}`;

export function isEmptyChange(change: OsmChange): boolean {
  return change.create.length + change.modify.length + change.delete.length + change.deleteIfUnused.length === 0;
}

/** How many changes an upload of `change` makes, as OSM counts them against a changeset's 10 000. */
export function changeCount(change: OsmChange): number {
  return change.create.length + change.modify.length + change.delete.length + change.deleteIfUnused.length;
}

/** A 409 that says the changeset is closed (full at 10 000 changes, idle, or closed by its owner). */
export const CHANGESET_CLOSED = /changeset \d+ was closed/i;
