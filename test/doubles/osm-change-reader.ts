import { XMLParser } from 'fast-xml-parser';

/**
 * Reads an uploaded osmChange in document order for element-by-element assertions in tests. It is
 * deliberately independent of the exporter's own XML code, so a bug there cannot hide itself.
 */
export interface UploadedElement {
  type: 'node' | 'way' | 'relation';
  /** Attributes as strings, exactly as uploaded (id, changeset, version, lat, lon). */
  attrs: Record<string, string>;
  tags: Record<string, string>;
  nodeRefs: string[];
  members: { type: string; ref: string; role: string }[];
}

export interface UploadedBlock {
  action: 'create' | 'modify' | 'delete';
  ifUnused: boolean;
  elements: UploadedElement[];
}

type Ordered = Record<string, unknown> & { ':@'?: Record<string, string> };
const parser = new XMLParser({ preserveOrder: true, ignoreAttributes: false, attributeNamePrefix: '', parseAttributeValue: false });
const nameOf = (n: Ordered) => Object.keys(n).find((k) => k !== ':@')!;
const children = (n: Ordered) => (n[nameOf(n)] as Ordered[]).filter((c) => nameOf(c) !== '#text');

export function readOsmChange(xml: string): UploadedBlock[] {
  const root = (parser.parse(xml) as Ordered[]).find((n) => nameOf(n) === 'osmChange');
  if (!root) throw new Error('not an osmChange document');
  return children(root).map((block) => ({
    action: nameOf(block) as UploadedBlock['action'],
    ifUnused: 'if-unused' in (block[':@'] ?? {}),
    elements: children(block).map((e) => {
      const inner = children(e);
      const tags: Record<string, string> = {};
      for (const t of inner.filter((c) => nameOf(c) === 'tag')) tags[t[':@']!.k!] = t[':@']!.v!;
      return {
        type: nameOf(e) as UploadedElement['type'],
        attrs: e[':@'] ?? {},
        tags,
        nodeRefs: inner.filter((c) => nameOf(c) === 'nd').map((c) => c[':@']!.ref!),
        members: inner.filter((c) => nameOf(c) === 'member').map((c) => ({ type: c[':@']!.type!, ref: c[':@']!.ref!, role: c[':@']!.role! })),
      };
    }),
  }));
}
