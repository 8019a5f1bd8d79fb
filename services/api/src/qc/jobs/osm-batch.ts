import type { JobHelpers } from 'graphile-worker';
import type { Logger } from 'pino';
import { withTransaction, type Db, type Queryable } from '../../db/pool.js';
import { RetryableExportError } from '../../exports/errors.js';
import { combineParts, findPartInDownload, touchedExisting, type BatchPart, type Download } from '../../exports/osm/batch.js';
import { OsmApiError, type OsmApiClient } from '../../exports/osm/client.js';
import { OsmExporter, outcomeOfError, recordOf, type OsmExportRecord } from '../../exports/osm/exporter.js';
import type { FeatureSnapshot } from '../../exports/types.js';
import { TASK_IDENTIFIERS, queueNameOf } from '../states.js';
import { exportRecord, finishAttempt, loadCategoryMapping, recentOsmEdits, snapshotFrom, type JobContext, type TerminalOutcome } from './context.js';
import { createPostgresJournal } from './journal.js';
import type { TaskDeps } from './tasks.js';

/**
 * OSM exports in batches: one changeset for nearby approvals (docs/qc.md, "Changesets").
 *
 * The graphile job of any OSM export job (the leader) claims, in one transaction, its own qc.jobs row
 * and other ready OSM export rows near it (status queued, within OSM_BATCH_RADIUS_M, at most
 * OSM_BATCH_MAX_FEATURES and never more than the hourly edit limit leaves) with FOR UPDATE SKIP
 * LOCKED, so two leaders never claim the same row; claims are serialised by an advisory lock so the
 * edit count they read is exact. Each claimed row is prepared on its own (conflation, journaled per
 * job, and the plan), then all plans go up as ONE osmChange into ONE changeset.
 *
 * Exactly once: before the upload, each row's journal_changeset_id and journal_plan (its part of the
 * osmChange) are written in one statement. After the upload, every row's outcome, export record and
 * element ids are written in one transaction. A worker killed in between leaves the rows `running`;
 * the surviving workers hand them back (releaseJobsOfDeadWorkers), and the next attempt of each row
 * reads its journaled changeset back from the API (the download) and finds its part there — the
 * upload is atomic, so either every part of it is there or none is — instead of uploading again.
 *
 * A row whose own plan fails on OSM (a 409 of a merged element) must not sink the others: when the
 * combined upload is refused, each part is uploaded alone into the same changeset and gets its own
 * outcome.
 */
type Helpers = Pick<JobHelpers, 'job' | 'addJob'>;

interface ClaimedRow extends JobContext {
  attempts: number;
  maxAttempts: number;
  journalChangesetId: number | null;
  journalPlan: BatchPart | null;
}

type Claim =
  | { kind: 'none' }
  | { kind: 'wait'; reason: string; runAt: Date }
  | { kind: 'batch'; batchId: number; rows: ClaimedRow[] };

const ADVISORY_KEY = 'qc.osm_export_batch_claim';

async function claimBatch(db: Db, leaderId: number, deps: TaskDeps, graphileWorkerId: string | null): Promise<Claim> {
  const { maxEditsPerHour: limit, batch } = deps.settings.osm.changeset;
  return withTransaction(db, async (client) => {
    await client.query(`SELECT pg_advisory_xact_lock(hashtext($1::text))`, [ADVISORY_KEY]);
    const leader = (
      await client.query(
        `SELECT j.status, j.feature_id AS "featureId", j.batch_id AS "batchId",
           EXISTS (SELECT 1 FROM qc.jobs e WHERE e.task = 'osm_export' AND e.feature_id = j.feature_id AND e.id < j.id
                     AND e.status IN ('queued', 'running', 'retrying')) AS "blocked"
         FROM qc.jobs j WHERE j.id = $1::bigint FOR UPDATE`,
        [leaderId],
      )
    ).rows[0] as { status: string; featureId: string; batchId: string | null; blocked: boolean } | undefined;
    // Finished, or running in a batch of a live worker (which records it): nothing to do here.
    if (!leader || (leader.status !== 'queued' && leader.status !== 'retrying')) return { kind: 'none' };
    // An earlier approval of the same feature is still on its way (claimed into another batch): after it.
    if (leader.blocked) return { kind: 'wait', reason: 'an earlier export of this feature is still running', runAt: new Date(Date.now() + 2_000) };

    // The edit limit counts features exported in the last hour and those being exported now.
    const { count, windowFreesAt } = await recentOsmEdits(client);
    const running = Number((await client.query(`SELECT count(*) AS n FROM qc.jobs WHERE task = 'osm_export' AND status = 'running'`)).rows[0].n);
    const allowance = deps.settings.osm.accessToken ? limit - count - running : batch.maxFeatures;
    if (allowance <= 0) {
      const runAt = new Date(Math.max((windowFreesAt ?? new Date()).getTime(), Date.now() + 1000));
      return { kind: 'wait', reason: `OSM edit limit of ${limit} per hour reached; waits until ${runAt.toISOString()}`, runAt };
    }

    const size = Math.min(allowance, batch.maxFeatures) - 1;
    const members = size <= 0 ? [] : (
      await client.query(
        `WITH leader AS (
           SELECT ST_Centroid(ST_GeomFromGeoJSON(t.snapshot->>'geometry'))::geography AS g
           FROM qc.jobs j JOIN qc.transitions t ON t.id = j.transition_id WHERE j.id = $1::bigint)
         SELECT j.id FROM qc.jobs j JOIN qc.transitions t ON t.id = j.transition_id CROSS JOIN leader
         WHERE j.task = 'osm_export' AND j.id <> $1::bigint AND j.feature_id <> $2::text
           AND ((j.status IN ('queued', 'retrying') AND j.batch_id = $3::bigint)
                OR (j.status = 'queued' AND ST_DWithin(ST_Centroid(ST_GeomFromGeoJSON(t.snapshot->>'geometry'))::geography, leader.g, $4::float8)))
           -- One row per feature, its earliest: a later approval waits for the earlier export.
           AND NOT EXISTS (SELECT 1 FROM qc.jobs e WHERE e.task = 'osm_export' AND e.feature_id = j.feature_id AND e.id < j.id
                             AND e.status IN ('queued', 'running', 'retrying'))
         ORDER BY (j.batch_id IS NOT DISTINCT FROM $3::bigint) DESC, j.id
         LIMIT $5::int
         FOR UPDATE OF j SKIP LOCKED`,
        [leaderId, leader.featureId, leader.batchId, batch.radiusM, size],
      )
    ).rows.map((r: { id: string }) => Number(r.id));
    const ids = [leaderId, ...members];
    const batchId = Number((await client.query(`INSERT INTO qc.osm_batches (leader_job_id, job_ids, process_id) VALUES ($1::bigint, $2::bigint[], $3::text) RETURNING id`, [leaderId, ids, deps.processId])).rows[0].id);
    const { rows } = await client.query(
      `UPDATE qc.jobs j SET status = 'running', attempts = j.attempts + 1, process_id = $2::text, batch_id = $3::bigint,
              graphile_worker_id = CASE WHEN j.id = $4::bigint THEN $5::text END, updated_at = clock_timestamp()
       FROM qc.transitions t
       WHERE j.id = ANY($1::bigint[]) AND t.id = j.transition_id
       RETURNING j.id, j.feature_id AS "featureId", j.version, j.attempts, coalesce(j.max_attempts, 12) AS "maxAttempts",
                 j.journal_changeset_id AS "journalChangesetId", j.journal_plan AS "journalPlan",
                 t.id AS "transitionId", t.actor, t.actor_name AS "actorName", t.comment, t.created_at AS "at", t.snapshot`,
      [ids, deps.processId, batchId, leaderId, graphileWorkerId],
    );
    const claimed = (rows as { id: string; featureId: string; version: number; attempts: number; maxAttempts: number; journalChangesetId: string | null; journalPlan: BatchPart | null; transitionId: string; actor: string; actorName: string | null; comment: string | null; at: Date; snapshot: Record<string, unknown> }[]).map(
      (r): ClaimedRow => ({
        id: Number(r.id),
        task: 'osm_export',
        featureId: r.featureId,
        version: r.version,
        attempts: r.attempts,
        maxAttempts: r.maxAttempts,
        journalChangesetId: r.journalChangesetId === null ? null : Number(r.journalChangesetId),
        journalPlan: r.journalPlan,
        transition: { id: Number(r.transitionId), actor: r.actor, actorName: r.actorName, comment: r.comment, at: new Date(r.at), snapshot: snapshotFrom(r.snapshot) },
      }),
    );
    claimed.sort((a, b) => (a.id === leaderId ? -1 : b.id === leaderId ? 1 : a.id - b.id));
    return { kind: 'batch', batchId, rows: claimed };
  });
}

/** Rows whose attempt ends without an outcome go back to the queue: the relay gives them a graphile job again. */
async function giveBack(db: Queryable, rows: readonly ClaimedRow[], reason: string, options: { countAttempt: boolean }): Promise<void> {
  if (rows.length === 0) return;
  await db.query(
    `UPDATE qc.jobs SET status = CASE WHEN $3::boolean THEN 'retrying' ELSE 'queued' END, last_error = CASE WHEN $3::boolean THEN $2::text ELSE last_error END,
            reason = CASE WHEN $3::boolean THEN reason ELSE $2::text END, attempts = CASE WHEN $3::boolean THEN attempts ELSE greatest(attempts - 1, 0) END,
            process_id = NULL, graphile_worker_id = NULL, relayed_at = NULL, updated_at = clock_timestamp()
     WHERE id = ANY($1::bigint[])`,
    [rows.map((r) => r.id), reason.slice(0, 2000), options.countAttempt],
  );
}

/** Run `work` over `items`, `limit` at a time. */
async function eachLimited<T>(items: readonly T[], limit: number, work: (item: T) => Promise<void>): Promise<void> {
  const queue = [...items];
  await Promise.all(Array.from({ length: Math.min(limit, queue.length) }, async () => {
    for (let item = queue.shift(); item !== undefined; item = queue.shift()) await work(item);
  }));
}

/**
 * One attempt of the OSM export job `leaderId`, exporting it together with the nearby rows it claims.
 * Throws (so graphile retries the leader with backoff) when the leader's own part failed transiently.
 */
export async function runOsmExportBatch(leaderId: number, helpers: Helpers, deps: TaskDeps, log: Logger): Promise<void> {
  const claim = await claimBatch(deps.db, leaderId, deps, helpers.job.locked_by);
  if (claim.kind === 'none') {
    log.info({ jobId: leaderId }, 'OSM export already finished or running in a batch; nothing to do');
    return;
  }
  if (claim.kind === 'wait') {
    const featureId = (await deps.db.query(`SELECT feature_id FROM qc.jobs WHERE id = $1::bigint`, [leaderId])).rows[0]?.feature_id as string;
    // The later run is queued first: a crash between the two leaves a job that runs twice (harmless).
    await helpers.addJob(TASK_IDENTIFIERS.osm_export, { jobId: leaderId }, { queueName: queueNameOf('osm_export', featureId) ?? undefined, runAt: claim.runAt, maxAttempts: helpers.job.max_attempts });
    await deps.db.query(`UPDATE qc.jobs SET reason = $2::text, updated_at = clock_timestamp() WHERE id = $1::bigint AND status IN ('queued', 'retrying')`, [leaderId, claim.reason]);
    log.info({ jobId: leaderId, reason: claim.reason }, 'OSM export deferred');
    return;
  }

  const { rows, batchId } = claim;
  const blog = log.child({ batchId, jobs: rows.map((r) => r.id) });
  try {
    await exportBatch(leaderId, rows, batchId, deps, blog);
  } catch (error) {
    // Anything unexpected: the rows without an outcome go back to the queue (the leader through
    // graphile's retry, which the caller arranges), never left running by a live worker.
    const open = await deps.db.query(`SELECT id FROM qc.jobs WHERE id = ANY($1::bigint[]) AND status = 'running' AND process_id = $2::text`, [rows.map((r) => r.id), deps.processId]);
    const stillRunning = new Set(open.rows.map((r: { id: string }) => Number(r.id)));
    await giveBack(deps.db, rows.filter((r) => r.id !== leaderId && stillRunning.has(r.id)), (error as Error).message ?? String(error), { countAttempt: true });
    throw error;
  }
}

async function exportBatch(leaderId: number, rows: ClaimedRow[], batchId: number, deps: TaskDeps, blog: Logger): Promise<void> {
  const exporter = new OsmExporter({ settings: deps.settings, mapping: await loadCategoryMapping(deps.db, deps.settings.osm.tagMapping) });
  const client = exporter.api;
  const outcomes = new Map<number, TerminalOutcome>();
  const transient = new Map<number, Error>();
  const parts: { row: ClaimedRow; part: BatchPart }[] = [];

  // 1. Recover what an earlier attempt uploaded, from the journaled changeset's download.
  const downloads = new Map<number, Promise<Download>>();
  const taken = new Set<string>();
  for (const row of rows) {
    if (row.journalChangesetId === null || row.journalPlan === null || client === null) continue;
    const changesetId = row.journalChangesetId;
    try {
      if (!downloads.has(changesetId)) downloads.set(changesetId, client.downloadChangeset(changesetId));
      const found = findPartInDownload(row.journalPlan, await downloads.get(changesetId)!, taken);
      if (found) {
        const result = recordOf(row.journalPlan, found.id, found.version, changesetId);
        outcomes.set(row.id, { status: 'exported', result, detail: `recovered from changeset ${changesetId}${row.journalPlan.detail ? `; ${row.journalPlan.detail}` : ''}` });
      }
    } catch (error) {
      if (error instanceof RetryableExportError) transient.set(row.id, error);
      else outcomes.set(row.id, safeOutcome(error));
    }
  }

  // 2. Prepare the others: conflation (journaled per job) and the plan, a few at a time.
  await eachLimited(rows.filter((r) => !outcomes.has(r.id) && !transient.has(r.id)), 4, async (row) => {
    try {
      const request = {
        snapshot: row.transition.snapshot,
        previous: await exportRecord<OsmExportRecord>(deps.db, row.featureId, 'osm'),
        journal: createPostgresJournal(deps.db, row.id),
      };
      if (row.journalChangesetId !== null && row.journalPlan === null) {
        // Journaled by the one-feature export of an earlier release: it recovers that changeset itself.
        outcomes.set(row.id, await exporter.export(request));
        return;
      }
      const prepared = await exporter.prepare(request);
      if ('part' in prepared) parts.push({ row, part: { ...prepared.part, key: row.id } });
      else outcomes.set(row.id, prepared);
    } catch (error) {
      if (error instanceof RetryableExportError) transient.set(row.id, error);
      else outcomes.set(row.id, safeOutcome(error));
    }
  });
  parts.sort((a, b) => rows.indexOf(a.row) - rows.indexOf(b.row));

  // Two parts touching the same existing element cannot share an upload: the later one waits.
  const seen = new Set<string>();
  const later: ClaimedRow[] = [];
  const batchParts = parts.filter(({ row, part }) => {
    const touched = [...touchedExisting(part.change)];
    if (touched.some((k) => seen.has(k))) {
      later.push(row);
      return false;
    }
    touched.forEach((k) => seen.add(k));
    return true;
  });

  // 3. One changeset, journaled with each part before the upload; one upload.
  if (batchParts.length > 0 && client) {
    try {
      await uploadBatch(deps.db, client, exporter, batchId, batchParts, outcomes, blog);
    } catch (error) {
      if (!(error instanceof RetryableExportError)) throw error;
      for (const { row } of batchParts) transient.set(row.id, error);
    }
  }

  // 4. Outcomes and element ids of every row in one transaction, with the batch marked done.
  await withTransaction(deps.db, async (tx) => {
    for (const row of rows) {
      const outcome = outcomes.get(row.id);
      if (outcome) await finishAttempt(tx, row, outcome, 'osm');
    }
    if (transient.size === 0 && later.length === 0) await tx.query(`UPDATE qc.osm_batches SET finished_at = clock_timestamp() WHERE id = $1::bigint`, [batchId]);
  });
  await giveBack(deps.db, later, 'waits for another export in its batch that changes the same OSM element', { countAttempt: false });

  // 5. Transient failures: the leader is retried by graphile with backoff; the others are given back
  //    (their next attempt reads the journaled changeset first), or fail on their last attempt.
  const leaderError = transient.get(leaderId);
  const others = rows.filter((r) => r.id !== leaderId && transient.has(r.id));
  const exhausted = others.filter((r) => r.attempts >= r.maxAttempts);
  for (const row of exhausted) await finishAttempt(deps.db, row, { status: 'failed', reason: `gave up after ${row.attempts} attempts: ${transient.get(row.id)!.message}` }, null);
  await giveBack(deps.db, others.filter((r) => !exhausted.includes(r)), others.map((r) => transient.get(r.id)!.message)[0] ?? '', { countAttempt: true });
  blog.info({ exported: [...outcomes.values()].filter((o) => o.status === 'exported').length, transient: transient.size }, 'OSM export batch finished');
  if (leaderError) throw leaderError;
}

/** A permanent error as an outcome; anything unexpected is recorded as failed rather than sinking the batch. */
function safeOutcome(error: unknown): TerminalOutcome {
  try {
    return outcomeOfError(error) as TerminalOutcome;
  } catch (unknown) {
    return { status: 'failed', reason: (unknown as Error).message ?? String(unknown) };
  }
}

async function uploadBatch(db: Db, client: OsmApiClient, exporter: OsmExporter, batchId: number, prepared: readonly { row: ClaimedRow; part: BatchPart }[], outcomes: Map<number, TerminalOutcome>, log: Logger): Promise<void> {
  const snapshots: FeatureSnapshot[] = prepared.map(({ row }) => row.transition.snapshot);
  const { parts, change } = combineParts(prepared.map(({ part }) => part));
  const changesetId = await client.createChangeset(exporter.changesetTags(snapshots));
  // The journal of every part, durable before the upload (one statement, autocommit).
  await db.query(
    `WITH journaled AS (
       UPDATE qc.jobs j SET journal_changeset_id = $2::bigint, journal_plan = p.plan, updated_at = clock_timestamp()
       FROM unnest($3::bigint[], $4::jsonb[]) AS p(id, plan) WHERE j.id = p.id RETURNING j.id)
     UPDATE qc.osm_batches SET changeset_id = $2::bigint WHERE id = $1::bigint AND (SELECT count(*) FROM journaled) >= 0`,
    [batchId, changesetId, parts.map((p) => p.key), parts.map((p) => JSON.stringify(p))],
  );

  const record = (part: BatchPart, diff: { type: string; oldId: number; newId?: number; newVersion?: number }[]) => {
    const root = diff.find((d) => d.type === part.root.type && d.oldId === part.root.id);
    const id = root?.newId ?? part.root.id;
    const version = root?.newVersion ?? part.unchangedRootVersion;
    if (id < 0 || version === undefined) throw new Error(`diffResult of changeset ${changesetId} lacks the root ${part.root.type} ${part.root.id}`);
    outcomes.set(part.key, { status: 'exported', result: recordOf(part, id, version, changesetId), ...(part.detail ? { detail: part.detail } : {}) });
  };
  try {
    const diff = await client.upload(changesetId, change);
    for (const part of parts) record(part, diff);
  } catch (error) {
    if (!(error instanceof OsmApiError) || parts.length === 1) {
      if (error instanceof OsmApiError) {
        outcomes.set(parts[0]!.key, safeOutcome(error));
        await client.closeChangeset(changesetId).catch(() => undefined);
        return;
      }
      throw error;
    }
    // One part spoils the atomic upload: each part alone, into the same changeset, gets its own outcome.
    log.warn({ err: error }, 'the batch upload was refused; uploading its parts one by one');
    for (const part of parts) {
      try {
        record(part, await client.upload(changesetId, part.change));
      } catch (partError) {
        if (partError instanceof OsmApiError) outcomes.set(part.key, safeOutcome(partError));
        else throw partError;
      }
    }
  }
  // After the outcome is known; closing is tidiness (OSM closes an idle changeset after an hour).
  await client.closeChangeset(changesetId).catch((error: unknown) => log.warn({ err: error, changesetId }, 'closing the changeset failed; OSM closes it when idle'));
}
