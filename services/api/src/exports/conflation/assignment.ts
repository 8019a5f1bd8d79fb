import { decide, type OsmConflationDecision, type ScoredCandidate } from './osm.js';

/**
 * One-to-one assignment of OSM elements to the features of a batch, by score (docs/qc.md,
 * "One-to-one assignment"), as osm_conflate and careful importers do it: every (feature, candidate)
 * pair of the batch is ranked, and the best pairs are taken first, each feature getting at most one
 * element and each element at most one feature. A lone export is a batch of one.
 *
 * Glossary:
 * - held: an element that is already another feature's — its export record, a link decided (by
 *   the automatic rule or a reviewer) for another feature's export not finished yet, or a plan of
 *   such an export waiting on the desk to modify it. It is never linked automatically to a second
 *   feature.
 * - pair: a feature and one of its strong candidates (scoreCandidates), with that candidate's score.
 *   Only strong pairs compete: a weak candidate is never linked automatically, so it takes nothing
 *   away from another feature.
 * - margin (OSM_CONFLATION_AMBIGUITY_MARGIN, 0.05): two scores closer than this are a tie a machine
 *   should not break — about 7.5 m of distance at the default radius, or a small name difference — so
 *   a reviewer is asked instead.
 *
 * The rule, per feature:
 * 1. no candidate at all → create;
 * 2. greedy: pairs by descending score (ties: nearer first, then the batch's order of features,
 *    then node < way < relation and the lower id), a pair is taken when neither its feature nor its
 *    element is taken yet;
 * 3. the feature's candidates without those held or taken by another feature are decided as for a
 *    lone feature (`decide`: one strong candidate that dominates the rest by name) — a feature whose
 *    candidates all went elsewhere is asked, never created (that would duplicate the element);
 * 4. an automatic link is asked instead when another candidate of the feature scores within the
 *    margin (unless another feature took it by more than the margin), or when another feature
 *    scores within the margin on the same element (unless that feature clearly prefers the element
 *    it got); the other feature is then asked by the same rule from its side.
 *
 * Deterministic: the same inputs in the same order give the same decisions.
 */
export interface AssignmentInput {
  /** How the other features' reasons name this one ("feature 3f2…"). */
  label: string;
  /** The feature's name (a candidate whose name is ours and more is never "clearly another object"). */
  name: string;
  /** As scoreCandidates found them. */
  candidates: readonly ScoredCandidate[];
  /** Elements other features hold (`type/id` → the holder's label), as seen from this feature. */
  held?: ReadonlyMap<string, string>;
}

const keyOf = (c: Pick<ScoredCandidate, 'type' | 'id'>) => `${c.type}/${c.id}`;
const nameOf = (key: string) => key.replace('/', ' ');
const TYPE_ORDER = { node: 0, way: 1, relation: 2 } as const;
const scoreOf = (c: ScoredCandidate) => c.score ?? 0;
const fixed = (v: number) => v.toFixed(3);
/** a - b in millionths: scores carry three decimals, so no float residue decides a tie. */
const diff = (a: number, b: number) => Math.round((a - b) * 1e6);

export function assignOneToOne(inputs: readonly AssignmentInput[], margin: number): OsmConflationDecision[] {
  const m = Math.round(margin * 1e6);
  /** a is above b by the margin or more. */
  const clearlyAbove = (a: number, b: number) => diff(a, b) >= m;
  const held = (i: number, key: string) => inputs[i]!.held?.get(key);
  /** The score of feature i on element `key`, when it is one of its candidates. */
  const score = (i: number, key: string): number | undefined => {
    const c = inputs[i]!.candidates.find((x) => keyOf(x) === key);
    return c ? scoreOf(c) : undefined;
  };

  // 2. Greedy over the strong pairs, best first.
  const pairs = inputs.flatMap((input, i) => input.candidates.filter((c) => c.strength === 'strong' && held(i, keyOf(c)) === undefined).map((c) => ({ i, c })));
  pairs.sort((a, b) => scoreOf(b.c) - scoreOf(a.c) || a.c.distanceM - b.c.distanceM || a.i - b.i || TYPE_ORDER[a.c.type] - TYPE_ORDER[b.c.type] || a.c.id - b.c.id);
  const owner = new Map<string, number>();
  const assigned = new Map<number, string>();
  for (const { i, c } of pairs) {
    const key = keyOf(c);
    if (assigned.has(i) || owner.has(key)) continue;
    owner.set(key, i);
    assigned.set(i, key);
  }

  /** Feature i's element `key` is someone else's beyond doubt: held, or taken by a feature scoring more than the margin above i. */
  const clearlyAnothers = (i: number, key: string) => {
    if (held(i, key) !== undefined) return true;
    const j = owner.get(key);
    return j !== undefined && j !== i && clearlyAbove(score(j, key)!, score(i, key)!);
  };
  /** Why feature i cannot have `key`, for the reason. */
  const whose = (i: number, key: string) => {
    const holder = held(i, key);
    if (holder !== undefined) return `${nameOf(key)} is already the OSM element of ${holder}`;
    const j = owner.get(key)!;
    const [theirs, ours] = [score(j, key)!, score(i, key)!];
    return clearlyAbove(theirs, ours)
      ? `${nameOf(key)} is the better match of ${inputs[j]!.label} (score ${fixed(theirs)} against ${fixed(ours)})`
      : `${nameOf(key)} is also the match of ${inputs[j]!.label} (score ${fixed(theirs)} against ${fixed(ours)}, within the ambiguity margin of ${margin})`;
  };

  return inputs.map((input, i): OsmConflationDecision => {
    const all = [...input.candidates];
    // 1. Nothing of the kind nearby.
    if (all.length === 0) return decide(all, input.name);
    const isOthers = (c: ScoredCandidate) => held(i, keyOf(c)) !== undefined || (owner.has(keyOf(c)) && owner.get(keyOf(c)) !== i);
    const available = all.filter((c) => !isOthers(c));
    const taken = all.filter(isOthers);
    const ask = (reason: string): OsmConflationDecision => ({ outcome: 'needs_decision', reason, candidates: all });
    // 3. Every candidate went to another feature: asked (a new element would duplicate one of them).
    if (available.length === 0) return ask(`${taken.map((c) => whose(i, keyOf(c))).join('; ')}: one element, two features`);
    const alone = decide(available, input.name);
    const elsewhere = taken.length > 0 ? `; ${taken.map((c) => whose(i, keyOf(c))).join('; ')}` : '';
    if (alone.outcome !== 'link') return ask(`${alone.reason}${elsewhere}`);

    // 4. The margin: a near tie with another of our candidates, or with another feature on this element.
    const key = keyOf(alone.target);
    const s = score(i, key)!;
    const rivalElement = all.find((c) => keyOf(c) !== key && !clearlyAbove(s, scoreOf(c)) && !clearlyAnothers(i, keyOf(c)));
    if (rivalElement) {
      const rival = keyOf(rivalElement);
      // Taken by another feature, but not clearly: which of the two has which was a coin flip.
      if (owner.has(rival) && owner.get(rival) !== i) return ask(`${whose(i, rival)}: one element, two features`);
      const [first, second] = scoreOf(rivalElement) > s ? [rivalElement, alone.target] : [alone.target, rivalElement];
      const scored = (c: Pick<ScoredCandidate, 'type' | 'id'>) => `${nameOf(keyOf(c))} (score ${fixed(score(i, keyOf(c))!)})`;
      return ask(`${scored(first)} and ${scored(second)} are within the ambiguity margin of ${margin}`);
    }
    const rivalFeature = inputs.findIndex((_other, j) => {
      if (j === i || held(j, key) !== undefined) return false;
      const theirs = score(j, key);
      if (theirs === undefined || clearlyAbove(s, theirs)) return false;
      // A feature that got an element it scores clearly higher does not want this one.
      const got = assigned.get(j);
      return !(got !== undefined && got !== key && clearlyAbove(score(j, got)!, theirs));
    });
    if (rivalFeature >= 0) {
      return ask(`${nameOf(key)} is also the match of ${inputs[rivalFeature]!.label} (score ${fixed(score(rivalFeature, key)!)} against ${fixed(s)}, within the ambiguity margin of ${margin}): one element, two features`);
    }
    return { ...alone, candidates: all, reason: `${alone.reason}${elsewhere}` };
  });
}
