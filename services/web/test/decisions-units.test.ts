import { describe, expect, it } from 'vitest';
import { messagesFor, translator } from '../src/i18n/index.js';
import { candidateKey, choiceOf, exportedElement, oldestFirst, waitingReason, type DecisionJob, type OsmCandidate } from '../src/lib/decisions.js';

describe('the conflation decision page’s helpers', () => {
  it('turns a radio value back into the API’s choice, and nothing else into one', () => {
    expect(choiceOf('create')).toBe('create');
    expect(choiceOf('way/123')).toEqual({ type: 'way', id: 123 });
    expect(choiceOf('Q42')).toEqual({ itemId: 'Q42' });
    for (const bad of ['', 'node/0', 'node/-1', 'area/5', 'Q0', 'q42', 'way/12x', 'create ']) expect(choiceOf(bad), bad).toBeUndefined();
  });

  it('keys a candidate by the element it names, which choiceOf reads back', () => {
    const osm: OsmCandidate = { type: 'relation', id: 7, name: null, tags: {}, distanceM: 0, overlap: 1, nameSimilarity: null, strength: 'weak', geometry: { type: 'Point', coordinates: [0, 0] } };
    expect(choiceOf(candidateKey(osm))).toEqual({ type: 'relation', id: 7 });
    expect(candidateKey({ itemId: 'Q7', label: null, distanceM: null, nameSimilarity: null, viaOsmLink: true, strength: 'strong' })).toBe('Q7');
  });

  it('says why a job waits in the page’s language, and passes unknown reasons through', () => {
    const de = translator(messagesFor('de'));
    const en = translator(messagesFor('en'));
    expect(waitingReason('2 candidates', de)).toBe('2 Kandidaten');
    expect(waitingReason('3 candidate items', en)).toBe('3 candidates');
    expect(waitingReason('one weak candidate (no name)', de)).toBe('ein unsicherer Kandidat');
    expect(waitingReason('one weak candidate item', en)).toBe('one uncertain candidate');
    expect(waitingReason('something new', de)).toBe('something new');
    expect(waitingReason(null, de)).toBe('—');
  });

  it('names the exported element from a job result, and lists waiting jobs oldest first', () => {
    expect(exportedElement({ type: 'node', id: 5, linked: true })).toBe('node 5');
    expect(exportedElement({ itemId: 'Q9', revisionId: 3 })).toBe('Q9');
    expect(exportedElement(null)).toBe('');
    expect(exportedElement('sent')).toBe('');
    const job = (id: number) => ({ id }) as DecisionJob;
    expect(oldestFirst([job(9), job(3), job(5)]).map((j) => j.id)).toEqual([3, 5, 9]);
  });
});
