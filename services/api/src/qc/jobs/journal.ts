import type { Queryable } from '../../db/pool.js';
import type { OsmConflationDecision } from '../../exports/conflation/osm.js';
import type { WikibaseConflationDecision } from '../../exports/conflation/wikibase.js';
import type { ExportJournal } from '../../exports/journal.js';

/**
 * The exporters' write-ahead journal, backed by the job's row in qc.jobs and its conflation decisions
 * in qc.conflation_decisions. Each record is its own statement on the pool (autocommit), so it is
 * durable before the exporter makes the remote call that depends on it — independent of any
 * transaction the job may have open.
 */
export function createPostgresJournal(db: Queryable, jobId: number): ExportJournal {
  const read = async <T>(column: 'journal_changeset_id' | 'journal_intent'): Promise<T | null> => {
    const { rows } = await db.query(`SELECT ${column} AS value FROM qc.jobs WHERE id = $1::bigint`, [jobId]);
    return ((rows[0] as { value: T | null } | undefined)?.value ?? null) as T | null;
  };
  const latestDecision = async <D>(target: 'osm' | 'wikibase'): Promise<D | null> => {
    const { rows } = await db.query(`SELECT decision FROM qc.conflation_decisions WHERE job_id = $1::bigint AND target = $2::text ORDER BY id DESC LIMIT 1`, [jobId, target]);
    return ((rows[0] as { decision: D } | undefined)?.decision ?? null) as D | null;
  };
  return {
    async recordedChangeset() {
      const value = await read<string>('journal_changeset_id');
      return value === null ? null : Number(value);
    },
    async recordChangeset(changesetId) {
      await db.query('UPDATE qc.jobs SET journal_changeset_id = $2::bigint, updated_at = clock_timestamp() WHERE id = $1::bigint', [jobId, changesetId]);
    },
    recordedIntent: () => read<string>('journal_intent'),
    async recordIntent(token) {
      await db.query('UPDATE qc.jobs SET journal_intent = $2::text, updated_at = clock_timestamp() WHERE id = $1::bigint', [jobId, token]);
    },
    recordedDecision: () => latestDecision<OsmConflationDecision>('osm'),
    recordDecision: (decision) => insertDecision(db, jobId, 'osm', decision, decision.outcome === 'link' ? `${decision.target.type}/${decision.target.id}` : null),
    recordedMatch: () => latestDecision<WikibaseConflationDecision>('wikibase'),
    recordMatch: (decision) => insertDecision(db, jobId, 'wikibase', decision, decision.outcome === 'link' ? decision.itemId : null),
  };
}

/** One decision row; automatic ones carry no decider. */
export async function insertDecision(
  db: Queryable,
  jobId: number,
  target: 'osm' | 'wikibase',
  decision: OsmConflationDecision | WikibaseConflationDecision,
  chosen: string | null,
): Promise<void> {
  const decider = 'decidedBy' in decision ? decision.decidedBy : null;
  const moveGeometry = decision.outcome === 'link' && 'moveGeometry' in decision ? decision.moveGeometry : false;
  await db.query(
    `INSERT INTO qc.conflation_decisions (feature_id, job_id, target, outcome, chosen, move_geometry, reason, candidates, decision, decided_by, decided_by_name)
     SELECT j.feature_id, j.id, $2::text, $3::text, $4::text, $5::boolean, $6::text, $7::jsonb, $8::jsonb, $9::text, $10::text
     FROM qc.jobs j WHERE j.id = $1::bigint`,
    [jobId, target, decision.outcome, chosen, moveGeometry, decision.reason, JSON.stringify(decision.candidates), JSON.stringify(decision), decider?.id ?? null, decider?.name ?? null],
  );
}
