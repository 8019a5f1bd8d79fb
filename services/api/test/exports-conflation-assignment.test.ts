/**
 * One-to-one assignment across a batch (assignment.ts, docs/qc.md "One-to-one assignment"). The
 * candidates are scored by the matcher itself (scoreCandidates) from positions in metres, so the
 * scores are the ones an export would see: at the default 30 m radius a same-named point loses about
 * 0.0067 of score per metre, and the default margin of 0.05 is about 7.5 m.
 */
import { describe, expect, it } from 'vitest';
import { testExportsSettings } from './exports-settings.js';
import type { Position } from '../src/exports/types.js';
import { assignOneToOne, type AssignmentInput } from '../src/exports/conflation/assignment.js';
import { decide, scoreCandidates, type OsmCandidate, type ScoredCandidate } from '../src/exports/conflation/osm.js';

const { conflation } = testExportsSettings().osm;
const MARGIN = conflation.ambiguityMargin;
const ORIGIN: Position = [11.9, 51.6];
/** The position `east` metres east of the origin. */
const at = (east: number): Position => [ORIGIN[0] + east / (111_320 * Math.cos((ORIGIN[1] * Math.PI) / 180)), ORIGIN[1]];
const memorial = (id: number, east: number, name: string): OsmCandidate => ({ type: 'node', id, tags: { historic: 'memorial', name }, shape: { kind: 'point', position: at(east) } });

/** A feature (a point `east` metres east of the origin) and its scored candidates among `osm`. */
function feature(label: string, name: string, east: number, osm: OsmCandidate[], held?: Map<string, string>): AssignmentInput {
  const candidates = scoreCandidates({ name, geometry: { type: 'Point', coordinates: at(east) } }, osm, conflation, [{ historic: ['memorial'] }]);
  return { label, name, candidates, ...(held ? { held } : {}) };
}
const linked = (d: ReturnType<typeof assignOneToOne>[number]) => (d.outcome === 'link' ? `${d.target.type}/${d.target.id}` : d.outcome);
const scoreOn = (input: AssignmentInput, id: number) => input.candidates.find((c: ScoredCandidate) => c.id === id)!.score!;

describe('one-to-one assignment by score', () => {
  it('the default margin is 0.05', () => {
    expect(MARGIN).toBe(0.05);
  });

  it('two features near one element: the nearer one is linked, the other is asked, never both linked', () => {
    const osm = [memorial(1, 0, 'Kriegerdenkmal Kirchberg')];
    const near = feature('feature near', 'Kriegerdenkmal Kirchberg', 1, osm);
    const far = feature('feature far', 'Kriegerdenkmal Kirchberg', 15, osm);
    // Alone, each would be linked to the element.
    expect([near, far].map((f) => linked(decide([...f.candidates], f.name)))).toEqual(['node/1', 'node/1']);

    for (const batch of [[near, far], [far, near]]) {
      const decisions = assignOneToOne(batch, MARGIN);
      const byLabel = new Map(batch.map((f, i) => [f.label, decisions[i]!] as const));
      expect(linked(byLabel.get('feature near')!)).toBe('node/1');
      expect(byLabel.get('feature far')).toMatchObject({ outcome: 'needs_decision', reason: 'node 1 is the better match of feature near (score 0.993 against 0.900): one element, two features' });
      // The question offers the element: a reviewer may still decide the far one is it.
      expect(byLabel.get('feature far')!.candidates.map((c) => c.id)).toEqual([1]);
    }
  });

  it('two features at the same distance: the better-named one is linked', () => {
    const osm = [memorial(1, 0, 'Kriegerdenkmal Kirchberg')];
    const exact = feature('feature exact', 'Kriegerdenkmal Kirchberg', 3, osm);
    const shorter = feature('feature shorter', 'Kriegerdenkmal', 3, osm);
    expect(shorter.candidates[0]).toMatchObject({ strength: 'strong', nameSimilarity: 0.85 });
    const [a, b] = assignOneToOne([shorter, exact], MARGIN);
    expect(linked(b!)).toBe('node/1');
    expect(a).toMatchObject({ outcome: 'needs_decision', reason: expect.stringMatching(/^node 1 is the better match of feature exact/) });
  });

  it('a swap: the earlier feature would take the element first-come, but the better match gets it', () => {
    // "Kriegerdenkmal" was approved first, 10 m from the element; "Kriegerdenkmal Kirchberg" later,
    // on the spot. First-come, the first export links the element (one strong candidate), and the
    // second one is left with a question or a duplicate.
    const osm = [memorial(1, 0, 'Kriegerdenkmal Kirchberg')];
    const first = feature('feature first', 'Kriegerdenkmal', 10, osm);
    const second = feature('feature second', 'Kriegerdenkmal Kirchberg', 0, osm);
    expect(linked(decide([...first.candidates], first.name))).toBe('node/1');

    const [a, b] = assignOneToOne([first, second], MARGIN);
    expect(linked(b!)).toBe('node/1');
    expect(a).toMatchObject({ outcome: 'needs_decision', reason: expect.stringMatching(/^node 1 is the better match of feature second \(score 1\.000 against 0\.793\)/) });
  });

  it('a feature pushed off its best element by a clearly better match takes its own, which alone it could not tell apart', () => {
    // Two memorials of one name 25 m apart; one feature on the first, the other between them, nearer the first.
    const osm = [memorial(1, 0, 'Gedenkstein Linde'), memorial(2, 25, 'Gedenkstein Linde')];
    const onFirst = feature('feature on 1', 'Gedenkstein Linde', 0, osm);
    const between = feature('feature between', 'Gedenkstein Linde', 10, osm);
    // Alone, neither is decided: two strong candidates of the same name.
    expect(decide([...between.candidates], between.name).outcome).toBe('needs_decision');
    expect(scoreOn(between, 1)).toBeGreaterThan(scoreOn(between, 2));

    const [a, b] = assignOneToOne([onFirst, between], MARGIN);
    expect(linked(a!)).toBe('node/1');
    expect(linked(b!)).toBe('node/2');
    expect(b!.reason).toMatch(/node 1 is the better match of feature on 1 \(score 1\.000 against 0\.933\)/);
  });

  it('the ambiguity margin: two features with near-equal scores on one element are both asked, and neither moves to its second choice', () => {
    const osm = [memorial(1, 0, 'Gedenkstein Linde'), memorial(2, 25, 'Gedenkstein Linde')];
    const a = feature('feature a', 'Gedenkstein Linde', 1, osm);
    const b = feature('feature b', 'Gedenkstein Linde', 3, osm);
    expect(scoreOn(a, 1) - scoreOn(b, 1)).toBeLessThan(MARGIN);

    const [da, db] = assignOneToOne([a, b], MARGIN);
    expect(da).toMatchObject({ outcome: 'needs_decision', reason: 'node 1 is also the match of feature b (score 0.980 against 0.993, within the ambiguity margin of 0.05): one element, two features' });
    // b is not linked to node 2 because node 1 went to a: that was a coin flip.
    expect(db).toMatchObject({ outcome: 'needs_decision', reason: 'node 1 is also the match of feature a (score 0.993 against 0.980, within the ambiguity margin of 0.05): one element, two features' });
    // Without a margin the greedy order decides: the nearer one links, the other takes the second element.
    expect(assignOneToOne([a, b], 0).map(linked)).toEqual(['node/1', 'node/2']);
  });

  it('a feature\'s best and second-best within the margin are asked about, even where the names tell them apart', () => {
    // An area drawn over the named cemetery by a third only (strong with the same name), and wholly
    // over another cemetery of a different name: the names pick the first, the places the second.
    const candidate = (id: number, name: string, nameSimilarity: number, overlap: number, strength: 'strong' | 'weak'): ScoredCandidate => ({
      type: 'way', id, name, tags: { landuse: 'cemetery', name }, distanceM: 0, overlap, nameSimilarity, strength, category: 'primary',
      score: Number((nameSimilarity * (0.6 + 0.4 * overlap)).toFixed(3)), geometry: { type: 'Polygon', coordinates: [] },
    });
    const named = candidate(1, 'Friedhof Oberau', 1, 0.3, 'strong');
    const other = candidate(2, 'Friedhof Niederau', 0.7, 1, 'weak');
    const input: AssignmentInput = { label: 'feature oberau', name: 'Friedhof Oberau', candidates: [named, other] };
    expect(linked(decide([named, other], input.name))).toBe('way/1');
    expect(assignOneToOne([input], MARGIN)).toMatchObject([{ outcome: 'needs_decision', reason: 'way 1 (score 0.720) and way 2 (score 0.700) are within the ambiguity margin of 0.05' }]);
    expect(linked(assignOneToOne([input], 0.01)[0]!)).toBe('way/1');
  });

  it('an element another feature holds is never linked: the feature is asked, not created (that would duplicate it)', () => {
    const osm = [memorial(1, 0, 'Kriegerdenkmal Kirchberg')];
    const later = feature('feature later', 'Kriegerdenkmal Kirchberg', 0, osm, new Map([['node/1', 'feature earlier']]));
    expect(assignOneToOne([later], MARGIN)).toMatchObject([{ outcome: 'needs_decision', reason: 'node 1 is already the OSM element of feature earlier: one element, two features', candidates: [{ id: 1 }] }]);
  });

  it('exact ties are asked at any margin above zero; at zero the earlier feature of the batch wins, the same on every run', () => {
    const osm = [memorial(1, 0, 'Lutherdenkmal')];
    const west = feature('feature west', 'Lutherdenkmal', -2, osm);
    const east = feature('feature east', 'Lutherdenkmal', 2, osm);
    expect(scoreOn(west, 1)).toBe(scoreOn(east, 1));
    expect(assignOneToOne([west, east], MARGIN).map((d) => d.outcome)).toEqual(['needs_decision', 'needs_decision']);
    expect(assignOneToOne([west, east], 0).map(linked)).toEqual(['node/1', 'needs_decision']);
    expect(assignOneToOne([east, west], 0).map(linked)).toEqual(['node/1', 'needs_decision']);
    expect(assignOneToOne([west, east], 0)).toEqual(assignOneToOne([west, east], 0));
  });

  it('no candidate: create; features far apart do not disturb each other', () => {
    const osm = [memorial(1, 0, 'Lutherdenkmal'), memorial(2, 500, 'Schillerdenkmal')];
    const decisions = assignOneToOne([feature('a', 'Lutherdenkmal', 2, osm), feature('b', 'Schillerdenkmal', 502, osm), feature('c', 'Goethedenkmal', 250, osm)], MARGIN);
    expect(decisions.map(linked)).toEqual(['node/1', 'node/2', 'create']);
  });
});
