/**
 * The shape limits of JSON the platform reads from outside (the API's bodies, the webhook's pushes),
 * checked on the text before it is parsed, so that no parse, walk or validation ever meets an
 * unbounded depth.
 */

/**
 * Arrays and objects may nest this deep (docs/api.md and docs/webhook.md, "Limits"). A feature needs 6
 * (the feature, its geometry, and a MultiPolygon's four levels of arrays), a push payload about 5;
 * anything deeper is refused before it is parsed, so no later step (validation, merge patch, CRS
 * transformation) ever walks an unbounded depth.
 */
export const MAX_JSON_DEPTH = 32;

/** What the pre-scan refuses: too deep a nesting, an object with too many members, too many containers. */
export interface ShapeLimits {
  maxDepth: number;
  maxMembers: number;
  /** Arrays and objects in all (a position is an array); unbounded when left out. */
  maxContainers?: number;
}

/**
 * The first place where the text breaks a shape limit, or undefined: an opening bracket deeper than
 * `maxDepth` or beyond the `maxContainers`th, or a member of an object beyond its `maxMembers`th. One pass over the text with a
 * fixed stack (the depth is bounded first); strings, with their escapes, are skipped, so brackets and
 * commas in them do not count. Malformed text is left to JSON.parse.
 */
export function shapeViolation(text: string, from: number, limits: ShapeLimits): { at: number; problem: 'depth' | 'members' | 'containers' } | undefined {
  const { maxDepth, maxMembers } = limits;
  const maxContainers = limits.maxContainers ?? Number.MAX_SAFE_INTEGER;
  let containers = 0;
  // Per open container: -1 for an array, else the members of the object seen so far.
  const members = new Int32Array(maxDepth + 1);
  let depth = 0;
  for (let i = from; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) {
      // Skip the string: to the next quote that no backslash escapes.
      for (i++; i < text.length; i++) {
        const s = text.charCodeAt(i);
        if (s === 0x5c) i++;
        else if (s === 0x22) break;
      }
    } else if (c === 0x7b || c === 0x5b) {
      if (++depth > maxDepth) return { at: i, problem: 'depth' };
      if (++containers > maxContainers) return { at: i, problem: 'containers' };
      members[depth] = c === 0x7b ? 1 : -1;
    } else if (c === 0x7d || c === 0x5d) {
      depth--;
    } else if (c === 0x2c && depth > 0 && members[depth]! > 0) {
      if (++members[depth]! > maxMembers) return { at: i, problem: 'members' };
    }
  }
  return undefined;
}

