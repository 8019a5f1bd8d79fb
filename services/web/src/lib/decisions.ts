import type { ScoredOsmCandidate, WikibaseCandidate } from '../../../shared/conflation.js';
import type { Geometry } from '../../../shared/features/schema.js';
import type { Translate } from '../i18n/index.js';

/**
 * Conflation decisions as the desk reads them (docs/qc.md "Decision flow"): GET /api/qc/jobs?status=
 * needs_decision lists each waiting export job with its feature and the candidates its lookup found;
 * POST /api/qc/jobs/{id}/decision takes one of them or "create".
 */
/** An OSM candidate with its geometry read as the feature schema's GeoJSON, for the review map. */
export type OsmCandidate = Omit<ScoredOsmCandidate, 'geometry'> & { geometry: Geometry };
export type { WikibaseCandidate };

export type Candidate = OsmCandidate | WikibaseCandidate;

export interface DecisionJob {
  id: number;
  featureId: string;
  version: number;
  task: 'osm_export' | 'wikibase_export';
  status: string;
  reason: string | null;
  updatedAt: string;
  feature: { name: string | null; kategorie: string | null; geometry: Geometry | null } | null;
  candidates: Candidate[] | null;
}

export type DecisionChoice = 'create' | { type: OsmCandidate['type']; id: number } | { itemId: string };

export const isOsmCandidate = (candidate: Candidate): candidate is OsmCandidate => 'type' in candidate;

/** The value of a candidate's radio button, and the element it names: "node/123" or "Q42". */
export function candidateKey(candidate: Candidate): string {
  return isOsmCandidate(candidate) ? `${candidate.type}/${candidate.id}` : candidate.itemId;
}

/** A radio button's value back as the API's choice; undefined for anything that is not one. */
export function choiceOf(value: string): DecisionChoice | undefined {
  if (value === 'create') return 'create';
  const osm = /^(node|way|relation)\/([1-9]\d*)$/.exec(value);
  if (osm) return { type: osm[1] as OsmCandidate['type'], id: Number(osm[2]) };
  return /^Q[1-9]\d*$/.test(value) ? { itemId: value } : undefined;
}

/** The element an export ended on, from the job's result: "node 70000002" or "Q42"; '' when none. */
export function exportedElement(result: unknown): string {
  if (!result || typeof result !== 'object') return '';
  const record = result as { type?: unknown; id?: unknown; itemId?: unknown };
  if (typeof record.type === 'string' && typeof record.id === 'number') return `${record.type} ${record.id}`;
  return typeof record.itemId === 'string' ? record.itemId : '';
}

/** Waiting jobs oldest first: whoever waited longest is decided first. */
export function oldestFirst(jobs: DecisionJob[]): DecisionJob[] {
  return [...jobs].sort((a, b) => a.id - b.id);
}

/**
 * Why a job waits, in the page's language: the export jobs' reasons ("2 candidates", "one weak
 * candidate (no name)", "3 candidate items", "one weak candidate item"); anything else as the API said it.
 */
export function waitingReason(reason: string | null, t: Translate): string {
  if (!reason) return '—';
  const several = /^(\d+) candidate(?:s| items)$/.exec(reason);
  if (several) return t('decisions.reason.several', { count: Number(several[1]) });
  return reason.startsWith('one weak candidate') ? t('decisions.reason.weak') : reason;
}
