import type { Queryable } from '../../db/pool.js';
import type { ExportJournal } from '../../exports/journal.js';

/**
 * The exporters' write-ahead journal, backed by the job's row in qc.jobs. Each record is its own
 * statement on the pool (autocommit), so it is durable before the exporter makes the remote call that
 * depends on it — independent of any transaction the job may have open.
 */
export function createPostgresJournal(db: Queryable, jobId: number): ExportJournal {
  const read = async <T>(column: 'journal_changeset_id' | 'journal_intent'): Promise<T | null> => {
    const { rows } = await db.query(`SELECT ${column} AS value FROM qc.jobs WHERE id = $1::bigint`, [jobId]);
    return ((rows[0] as { value: T | null } | undefined)?.value ?? null) as T | null;
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
  };
}
