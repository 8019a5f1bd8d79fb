import type { JobHelpers } from 'graphile-worker';
import type { Logger } from 'pino';
import { withTransaction, type Db, type Queryable } from '../../db/pool.js';
import { RetryableExportError } from '../../exports/errors.js';
import { combineParts, createdNodesOf, findPartInDownload, groupParts, reuseCreatedNodes, touchedExisting, type BatchPart, type Download } from '../../exports/osm/batch.js';
import type { ScoredOsmCandidate } from '../../../../shared/conflation.js';
import { OsmApiError, type OsmApiClient } from '../../exports/osm/client.js';
import { reviewOf, rootCandidate } from '../../exports/osm/review.js';
import { CHANGESET_CLOSED, changeCount, type DiffResultEntry } from '../../exports/osm/model.js';
import { OsmExporter, outcomeOfError, recordOf, type OsmExportRecord, type OsmExportRequest } from '../../exports/osm/exporter.js';
import { assignOneToOne } from '../../exports/conflation/assignment.js';
import type { FeatureSnapshot } from '../../exports/types.js';
import { addGraphileJob, queueForRelay } from '../queries.js';
import { TASK_IDENTIFIERS } from '../states.js';
import { finishAttempt, loadCategoryMapping, recentOsmEdits, snapshotFrom, type JobContext, type TerminalOutcome } from './context.js';
import { heldElements, latestOsmDecisions, type HeldElement } from './held.js';
import { createPostgresJournal } from './journal.js';
import type { TaskDeps } from './task-deps.js';

/**
 * OSM exports in batches: one changeset for nearby approvals (docs/qc.md, "Changesets").
 *
 * The graphile job of any OSM export job (the leader) claims, in one transaction, its own qc.jobs row
 * and other ready OSM export rows near it (status queued, within OSM_BATCH_RADIUS_M, at most
 * OSM_BATCH_MAX_FEATURES and never more than the hourly edit limit leaves) with FOR UPDATE SKIP
 * LOCKED, so two leaders never claim the same row; claims are serialised by an advisory lock so the
 * edit count they read is exact. Each claimed row looks up its conflation candidates on its own; the
 * batch then assigns elements to features one-to-one by score (exports/conflation/assignment.ts) and
 * journals each row's decision; each row's plan follows from it, and all plans go up as ONE
 * osmChange into ONE changeset (or several, at the changeset limit, sharing created nodes).
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
type Helpers = Pick<JobHelpers, 'job'>;

interface ClaimedRow extends JobContext {
  attempts: number;
  maxAttempts: number;
  journalChangesetId: number | null;
  journalPlan: BatchPart | null;
  /** The feature's export records as the claim found them (no other export of it runs meanwhile). */
  previousOsm: OsmExportRecord | null;
  wikidataItem: string | null;
}

type Claim =
  | { kind: 'none' }
  | { kind: 'wait'; reason: string; runAt: Date }
  | { kind: 'batch'; batchId: number; rows: ClaimedRow[] };

const ADVISORY_KEY = 'qc.osm_export_batch_claim';

async function claimBatch(db: Db, leaderId: number, deps: TaskDeps, graphileWorkerId: string | null): Promise<Claim> {
  const { maxEditsPerHour: limit, batch } = deps.settings.osm.changeset;
  // Most graphile jobs of OSM exports find their row already exported in another job's batch (or
  // running in one): told by one read, without the claim's transaction and its lock. A row leaves
  // those states only through the outbox, which gives it a graphile job of its own again.
  const { rows: seen } = await db.query(`SELECT status FROM qc.jobs WHERE id = $1::bigint`, [leaderId]);
  const status = (seen[0] as { status: string } | undefined)?.status;
  if (status !== 'queued' && status !== 'retrying') return { kind: 'none' };
  return withTransaction(db, async (client) => {
    await client.query(`SELECT pg_advisory_xact_lock(hashtext($1::text))`, [ADVISORY_KEY]);
    const leader = (
      await client.query(
        `SELECT j.status, j.feature_id AS "featureId", j.batch_id AS "batchId", j.not_before AS "notBefore",
           EXISTS (SELECT 1 FROM qc.jobs e WHERE e.task = 'osm_export' AND e.feature_id = j.feature_id AND e.id < j.id
                     AND e.status IN ('queued', 'running', 'retrying')) AS "blocked"
         FROM qc.jobs j WHERE j.id = $1::bigint FOR UPDATE`,
        [leaderId],
      )
    ).rows[0] as { status: string; featureId: string; batchId: string | null; blocked: boolean; notBefore: Date | null } | undefined;
    // Finished, or running in a batch of a live worker (which records it): nothing to do here.
    if (!leader || (leader.status !== 'queued' && leader.status !== 'retrying')) return { kind: 'none' };
    // An earlier approval of the same feature is still on its way (claimed into another batch): after it.
    if (leader.blocked) return { kind: 'wait', reason: 'an earlier export of this feature is still running', runAt: new Date(Date.now() + 2_000) };
    // Given back after a transient failure (Retry-After, backoff): not before its time.
    if (leader.notBefore && new Date(leader.notBefore).getTime() > Date.now()) return { kind: 'wait', reason: `retries at ${new Date(leader.notBefore).toISOString()}`, runAt: new Date(leader.notBefore) };

    // The edit limit counts changes uploaded in the last hour, and one for each export running now
    // (its changes are not known yet); exportBatch trims the batch to the budget once they are.
    const { count, windowFreesAt } = await recentOsmEdits(client);
    const running = Number((await client.query(`SELECT count(*) AS n FROM qc.jobs WHERE task = 'osm_export' AND status = 'running'`)).rows[0].n);
    const allowance = deps.settings.osm.accessToken ? limit - count - running : batch.maxFeatures;
    if (allowance <= 0) {
      const runAt = new Date(Math.max((windowFreesAt ?? new Date()).getTime(), Date.now() + 1000));
      return { kind: 'wait', reason: `OSM edit limit of ${limit} changes per hour reached; waits until ${runAt.toISOString()}`, runAt };
    }

    const size = Math.min(allowance, batch.maxFeatures) - 1;
    const members = size <= 0 ? [] : (
      await client.query(
        `WITH leader AS (
           SELECT ST_Centroid(ST_GeomFromGeoJSON(t.snapshot->>'geometry'))::geography AS g
           FROM qc.jobs j JOIN qc.transitions t ON t.id = j.transition_id WHERE j.id = $1::bigint)
         SELECT j.id FROM qc.jobs j JOIN qc.transitions t ON t.id = j.transition_id CROSS JOIN leader
         WHERE j.task = 'osm_export' AND j.id <> $1::bigint AND j.feature_id <> $2::text
           AND (j.not_before IS NULL OR j.not_before <= now())
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
      // An attempt is counted for the leader only: a row claimed into another export's batch uses
      // none of its own (before, every claim counted one for every member).
      `UPDATE qc.jobs j SET status = 'running', attempts = j.attempts + CASE WHEN j.id = $4::bigint THEN 1 ELSE 0 END, not_before = NULL,
              process_id = $2::text, batch_id = $3::bigint,
              graphile_worker_id = CASE WHEN j.id = $4::bigint THEN $5::text END, updated_at = clock_timestamp()
       FROM qc.transitions t
       WHERE j.id = ANY($1::bigint[]) AND t.id = j.transition_id
       RETURNING j.id, j.feature_id AS "featureId", j.version, j.attempts, coalesce(j.max_attempts, 12) AS "maxAttempts",
                 j.journal_changeset_id AS "journalChangesetId", j.journal_plan AS "journalPlan",
                 t.id AS "transitionId", t.actor, t.actor_name AS "actorName", t.comment, t.created_at AS "at", t.snapshot,
                 (SELECT r.record FROM qc.export_records r WHERE r.feature_id = j.feature_id AND r.target = 'osm') AS "previousOsm",
                 (SELECT r.record->>'itemId' FROM qc.export_records r WHERE r.feature_id = j.feature_id AND r.target = 'wikibase') AS "wikidataItem"`,
      [ids, deps.processId, batchId, leaderId, graphileWorkerId],
    );
    const claimed = (rows as { id: string; featureId: string; version: number; attempts: number; maxAttempts: number; journalChangesetId: string | null; journalPlan: BatchPart | null; transitionId: string; actor: string; actorName: string | null; comment: string | null; at: Date; snapshot: Record<string, unknown>; previousOsm: OsmExportRecord | null; wikidataItem: string | null }[]).map(
      (r): ClaimedRow => ({
        id: Number(r.id),
        task: 'osm_export',
        featureId: r.featureId,
        version: r.version,
        attempts: r.attempts,
        maxAttempts: r.maxAttempts,
        journalChangesetId: r.journalChangesetId === null ? null : Number(r.journalChangesetId),
        journalPlan: r.journalPlan,
        previousOsm: r.previousOsm,
        wikidataItem: r.wikidataItem,
        transition: { id: Number(r.transitionId), actor: r.actor, actorName: r.actorName, comment: r.comment, at: new Date(r.at), snapshot: snapshotFrom(r.snapshot) },
      }),
    );
    claimed.sort((a, b) => (a.id === leaderId ? -1 : b.id === leaderId ? 1 : a.id - b.id));
    return { kind: 'batch', batchId, rows: claimed };
  });
}

/**
 * Rows whose attempt ends without an outcome go back to the queue (the relay gives them a graphile
 * job again), not claimed before `notBefore`. `error`: a transient failure (status retrying, the
 * message as last_error); otherwise a wait (status queued, the message as reason). No attempt is
 * counted here: the claim counted the leader's. `leaderId`: the leader, when among `rows`, goes back
 * without entering the outbox, because the caller queues its next graphile job itself (queueAgain).
 */
async function giveBack(db: Queryable, rows: readonly ClaimedRow[], message: string, options: { error: boolean; notBefore?: Date; leaderId?: number }): Promise<void> {
  if (rows.length === 0) return;
  await db.query(
    `WITH back AS (
       UPDATE qc.jobs SET status = CASE WHEN $3::boolean THEN 'retrying' ELSE 'queued' END, last_error = CASE WHEN $3::boolean THEN $2::text ELSE last_error END,
              reason = CASE WHEN $3::boolean THEN reason ELSE $2::text END, not_before = $4::timestamptz,
              process_id = NULL, graphile_worker_id = NULL, updated_at = clock_timestamp()
       WHERE id = ANY($1::bigint[])
       RETURNING id
     ), outbox AS (
       ${queueForRelay('(SELECT id FROM back WHERE id IS DISTINCT FROM $5::bigint)')}
     )
     SELECT count(*) FROM back`,
    [rows.map((r) => r.id), message.slice(0, 2000), options.error, options.notBefore ?? null, options.leaderId ?? null],
  );
}

/** When a transient failure is tried again: the server's Retry-After, else e^attempts seconds (as graphile), at most 6 h. */
export function retryDelayMs(error: Error, attempts: number): number {
  const retryAfter = error instanceof RetryableExportError ? error.retryAfterMs : undefined;
  const backoff = Math.min(Math.exp(Math.max(1, attempts)) * 1000, 6 * 3_600_000);
  return retryAfter !== undefined ? Math.min(retryAfter, 24 * 3_600_000) : backoff;
}

/** Run `work` over `items`, `limit` at a time. */
export async function eachLimited<T>(items: readonly T[], limit: number, work: (item: T) => Promise<void>): Promise<void> {
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
    // The later run is queued first: a crash between the two leaves a job that runs twice (harmless).
    await queueAgain(deps.db, leaderId, claim.runAt, helpers);
    await deps.db.query(`UPDATE qc.jobs SET reason = $2::text, updated_at = clock_timestamp() WHERE id = $1::bigint AND status IN ('queued', 'retrying')`, [leaderId, claim.reason]);
    log.info({ jobId: leaderId, reason: claim.reason }, 'OSM export deferred');
    return;
  }

  const { rows, batchId } = claim;
  const blog = log.child({ batchId, jobs: rows.map((r) => r.id) });
  try {
    const outcome = await exportBatch(leaderId, rows, batchId, deps, blog);
    const leader = rows.find((r) => r.id === leaderId)!;
    if (outcome === 'deferred') {
      // Held back by the hourly edit limit before anything was sent: like the other rows it goes back
      // without using an attempt (the claim counted one for the leader).
      const runAt = (
        await deps.db.query(`UPDATE qc.jobs SET attempts = greatest(attempts - 1, 0) WHERE id = $1::bigint RETURNING not_before AS "notBefore"`, [leaderId])
      ).rows[0]?.notBefore as Date | null;
      await queueAgain(deps.db, leaderId, runAt ?? new Date(Date.now() + 60_000), helpers);
    } else if (outcome) {
      const { error: leaderError, retryFrom } = outcome;
      // The leader's own transient failure: retried at the server's Retry-After (or with backoff) by
      // a job of its own, its attempts counted in qc.jobs (once per claim), until the last one.
      if (leader.attempts >= leader.maxAttempts) {
        await finishAttempt(deps.db, leader, { status: 'failed', reason: `gave up after ${leader.attempts} attempts: ${leaderError.message}` }, null);
        blog.error({ err: leaderError }, 'QC job failed on its last attempt');
        return;
      }
      const runAt = new Date(retryFrom + retryDelayMs(leaderError, leader.attempts));
      await giveBack(deps.db, [leader], leaderError.message, { error: true, notBefore: runAt, leaderId });
      await queueAgain(deps.db, leaderId, runAt, helpers);
      blog.warn({ err: leaderError, runAt }, 'OSM export failed transiently; tried again at runAt');
    }
  } catch (error) {
    // Anything unexpected: the rows without an outcome go back to the queue (the leader through
    // graphile's retry, which the caller arranges), never left running by a live worker.
    const open = await deps.db.query(`SELECT id FROM qc.jobs WHERE id = ANY($1::bigint[]) AND status = 'running' AND process_id = $2::text`, [rows.map((r) => r.id), deps.processId]);
    const stillRunning = new Set(open.rows.map((r: { id: string }) => Number(r.id)));
    await giveBack(deps.db, rows.filter((r) => r.id !== leaderId && stillRunning.has(r.id)), (error as Error).message ?? String(error), { error: true, notBefore: new Date(Date.now() + 60_000) });
    throw error;
  }
}

/** The leader's next graphile job, not before `runAt`, in its feature's export queue, with the attempts graphile gave this one. */
/** The leader's own transient failure and the instant its retry delay counts from. */
interface LeaderTransient {
  error: Error;
  retryFrom: number;
}

async function queueAgain(db: Queryable, jobId: number, runAt: Date, helpers: Helpers): Promise<void> {
  const again = addGraphileJob(jobId, TASK_IDENTIFIERS.osm_export, true, runAt, helpers.job.max_attempts);
  await db.query(again.text, again.values);
}

/**
 * The leader's transient error, with the instant its retry delay counts from (the caller
 * reschedules it); 'deferred' when the hourly budget holds it back; or null.
 */
async function exportBatch(leaderId: number, rows: ClaimedRow[], batchId: number, deps: TaskDeps, blog: Logger): Promise<LeaderTransient | 'deferred' | null> {
  const exporter = new OsmExporter({ settings: deps.settings, mapping: await loadCategoryMapping(deps.db, deps.settings.osm.tagMapping) });
  const client = exporter.api;
  const outcomes = new Map<number, TerminalOutcome>();
  /** Changes per exported row, for the hourly budget. */
  const changes = new Map<number, number>();
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
        changes.set(row.id, changeCount(row.journalPlan.change));
        outcomes.set(row.id, { status: 'exported', result, detail: `recovered from changeset ${changesetId}${row.journalPlan.detail ? `; ${row.journalPlan.detail}` : ''}` });
      }
    } catch (error) {
      if (error instanceof RetryableExportError) transient.set(row.id, error);
      else outcomes.set(row.id, safeOutcome(error));
    }
  }

  // 2. Conflation: each row's lookup (a few at a time), then one one-to-one assignment over the
  //    batch by score (exports/conflation/assignment.ts), journaled per row before any plan is made.
  const requests = new Map<number, OsmExportRequest>();
  const looked: { row: ClaimedRow; candidates: ScoredOsmCandidate[] }[] = [];
  await eachLimited(rows.filter((r) => !outcomes.has(r.id) && !transient.has(r.id)), 4, async (row) => {
    try {
      const request: OsmExportRequest = { snapshot: row.transition.snapshot, previous: row.previousOsm, journal: createPostgresJournal(deps.db, row.id), wikidataItem: row.wikidataItem };
      if (row.journalChangesetId !== null && row.journalPlan === null) {
        // Journaled by the one-feature export of an earlier release: it recovers that changeset itself.
        outcomes.set(row.id, await exporter.export({ ...request, heldElsewhere: async (elements) => heldFor(row, await heldElements(deps.db, elements.map((e) => `${e.type}/${e.id}`), [row.id])) }));
        return;
      }
      requests.set(row.id, request);
      const found = await exporter.lookup(request);
      if (found === null) return;
      if ('status' in found) {
        outcomes.set(row.id, found);
        requests.delete(row.id);
      } else looked.push({ row, candidates: found.candidates });
    } catch (error) {
      requests.delete(row.id);
      if (error instanceof RetryableExportError) transient.set(row.id, error);
      else outcomes.set(row.id, safeOutcome(error));
    }
  });
  await assignBatch(deps.db, rows, looked, deps.settings.osm.conflation.ambiguityMargin);

  // 3. The plans, a few at a time: each reads its journaled decision back.
  await eachLimited(rows.filter((r) => requests.has(r.id)), 4, async (row) => {
    try {
      const prepared = await exporter.prepare(requests.get(row.id)!);
      if ('part' in prepared) parts.push({ row, part: { ...prepared.part, key: row.id } });
      else outcomes.set(row.id, prepared);
    } catch (error) {
      if (error instanceof RetryableExportError) transient.set(row.id, error);
      else outcomes.set(row.id, safeOutcome(error));
    }
  });
  parts.sort((a, b) => rows.indexOf(a.row) - rows.indexOf(b.row));

  // Nothing reaches OSM unseen: a plan goes up when a reviewer confirmed exactly this plan (the
  // decision answering a pending plan whose osmChange is this one's), or when its category may be
  // uploaded automatically (OSM_AUTO_UPLOAD_CATEGORIES). Every other plan is stored with the job's
  // pending decision and waits on the desk.
  const latest = new Map((await latestOsmDecisions(deps.db, rows.map((r) => r.id))).map((d) => [d.jobId, d] as const));
  for (const p of [...parts]) {
    const snapshot = p.row.transition.snapshot;
    if (deps.settings.osm.autoUpload.has(snapshot.kategorie)) continue;
    const d = latest.get(p.row.id);
    const candidates = (d?.candidates ?? []) as ScoredOsmCandidate[];
    const matched = d?.outcome === 'link' ? (candidates.find((c) => `${c.type}/${c.id}` === d.chosen) ?? null) : null;
    const review = reviewOf(snapshot, p.part, p.part.beforeTags ?? {}, matched, null);
    if (d?.decidedBy && d.answeredPlan === review.osmChange) continue;
    const offered = review.proposed === 'create' || candidates.some((c) => c.type === p.part.root.type && c.id === p.part.root.id)
      ? candidates
      : [rootCandidate(p.part, p.part.beforeTags ?? {}, review.preview.before?.geometry ?? null), ...candidates];
    const what = review.action === 'create' ? 'create a new element' : `${review.action === 'none' ? 'keep' : 'modify'} ${p.part.root.type} ${p.part.root.id}`;
    const reason = `the plan awaits a reviewer: ${what}, ${review.tagChanges.length} tag change${review.tagChanges.length === 1 ? '' : 's'}${d?.decidedBy && d.answeredPlan ? ' (OSM or the choice changed since the last plan)' : ''}`;
    await createPostgresJournal(deps.db, p.row.id).recordDecision({ outcome: 'needs_decision', reason, candidates: offered, plan: review });
    outcomes.set(p.row.id, { status: 'needs_decision', reason, candidates: offered });
    parts.splice(parts.indexOf(p), 1);
  }

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

  // 4. The hourly budget, in changes: parts beyond it wait (no attempt used) until the window frees.
  const { maxEditsPerHour: limit } = deps.settings.osm.changeset;
  const { count, windowFreesAt } = await recentOsmEdits(deps.db);
  let budget = limit - count;
  const deferred: ClaimedRow[] = [];
  const within = batchParts.filter(({ row, part }) => {
    const n = changeCount(part.change);
    if (n > budget) {
      deferred.push(row);
      return false;
    }
    budget -= n;
    return true;
  });

  // 5. Changesets of at most OSM_MAX_CHANGES_PER_CHANGESET changes, each journaled with its parts
  //    before the upload, each closed whatever happens.
  if (within.length > 0 && client) {
    try {
      await uploadBatch({ db: deps.db, client, exporter, batchId, outcomes, changes, log: blog }, within, deps.settings.osm.changeset.maxChangesPerChangeset);
    } catch (error) {
      if (!(error instanceof RetryableExportError)) throw error;
      for (const { row } of within) if (!outcomes.has(row.id)) transient.set(row.id, error);
    }
  }

  // 6. Outcomes and element ids of every row in one transaction, with the batch marked done.
  await withTransaction(deps.db, async (tx) => {
    for (const row of rows) {
      const outcome = outcomes.get(row.id);
      if (!outcome) continue;
      await finishAttempt(tx, row, outcome, 'osm');
      if (changes.has(row.id)) await tx.query(`UPDATE qc.jobs SET osm_changes = $2::int WHERE id = $1::bigint`, [row.id, changes.get(row.id)]);
    }
    if (transient.size === 0 && later.length === 0 && deferred.length === 0) await tx.query(`UPDATE qc.osm_batches SET finished_at = clock_timestamp() WHERE id = $1::bigint`, [batchId]);
  });
  await giveBack(deps.db, later, 'waits for another export in its batch that changes the same OSM element', { error: false });
  const freesAt = new Date(Math.max((windowFreesAt ?? new Date()).getTime(), Date.now() + 1000));
  // The leader among them comes back as 'deferred' and its caller queues it again.
  await giveBack(deps.db, deferred, `OSM edit limit of ${limit} changes per hour reached; waits until ${freesAt.toISOString()}`, { error: false, notBefore: freesAt, leaderId });

  // 7. Transient failures: the leader's goes to the caller (rescheduled at Retry-After or with
  //    backoff); the others go back to the queue until the same time, without using an attempt.
  //    Every delay counts from one instant: rows refused by one answer (a 429's Retry-After) are due
  //    together, so whichever of their jobs comes first takes the others into its batch again.
  const retryFrom = Date.now();
  const leaderError = transient.get(leaderId) ?? null;
  const others = rows.filter((r) => r.id !== leaderId && transient.has(r.id));
  for (const row of others) {
    const error = transient.get(row.id)!;
    await giveBack(deps.db, [row], error.message, { error: true, notBefore: new Date(retryFrom + retryDelayMs(error, Math.max(1, row.attempts))) });
  }
  blog.info({ exported: [...outcomes.values()].filter((o) => o.status === 'exported').length, transient: transient.size, deferred: deferred.length }, 'OSM export batch finished');
  if (leaderError) return { error: leaderError, retryFrom };
  return deferred.some((r) => r.id === leaderId) ? 'deferred' : null;
}

/** What other features hold, as one feature sees it: `type/id` → "feature …" (its own holdings left out). */
function heldFor(row: Pick<ClaimedRow, 'featureId'>, held: readonly HeldElement[]): Map<string, string> {
  return new Map(held.filter((h) => h.featureId !== row.featureId).map((h) => [h.element, `feature ${h.featureId}`] as const));
}

/**
 * One-to-one across the batch (docs/qc.md "One-to-one assignment"): the rows looked up now are
 * assigned together by score, against the elements other features hold (export records, links of
 * exports on their way, links journaled for the batch's other rows), and each decision is journaled.
 * Rows are assigned in job order, so ties go the same way on every run.
 *
 * Then, written first and read after: every automatic link of the batch — made now, or journaled by
 * an earlier attempt — whose element another feature holds by now is asked instead. Of two batches
 * deciding at the same moment, at least one sees the other's journaled link this way (each decision
 * is committed before the read), so the same element never goes to two features unasked; a
 * reviewer's link stands.
 */
async function assignBatch(db: Db, rows: readonly ClaimedRow[], looked: readonly { row: ClaimedRow; candidates: ScoredOsmCandidate[] }[], margin: number): Promise<void> {
  const rowOf = new Map(rows.map((r) => [r.id, r] as const));
  const jobIds = rows.map((r) => r.id);
  const recorded = (await latestOsmDecisions(db, jobIds)).filter((d) => d.outcome === 'link' && d.chosen !== null);
  const inside: HeldElement[] = recorded.map((d) => ({ element: d.chosen!, featureId: rowOf.get(d.jobId)!.featureId }));
  const elements = [...new Set(looked.flatMap(({ candidates }) => candidates.map((c) => `${c.type}/${c.id}`)))];
  const held = [...(await heldElements(db, elements, jobIds)), ...inside];

  const fresh = [...looked].sort((a, b) => a.row.id - b.row.id);
  const decisions = assignOneToOne(fresh.map(({ row, candidates }) => ({ label: `feature ${row.featureId}`, name: row.transition.snapshot.name, candidates, held: heldFor(row, held) })), margin);
  for (const [i, { row }] of fresh.entries()) await createPostgresJournal(db, row.id).recordDecision(decisions[i]!);

  const automatic = [
    ...fresh.flatMap(({ row }, i) => {
      const d = decisions[i]!;
      return d.outcome === 'link' ? [{ row, element: `${d.target.type}/${d.target.id}`, candidates: d.candidates }] : [];
    }),
    ...recorded.filter((d) => d.decidedBy === null).map((d) => ({ row: rowOf.get(d.jobId)!, element: d.chosen!, candidates: d.candidates as ScoredOsmCandidate[] })),
  ];
  if (automatic.length === 0) return;
  const now = [...(await heldElements(db, automatic.map((a) => a.element), jobIds)), ...inside];
  for (const { row, element, candidates } of automatic) {
    const holder = heldFor(row, now).get(element);
    if (holder === undefined) continue;
    const reason = `${element.replace('/', ' ')} is already the OSM element of ${holder}: one element, two features`;
    await createPostgresJournal(db, row.id).recordDecision({ outcome: 'needs_decision', reason, candidates });
  }
}

/** A permanent error as an outcome; anything unexpected is recorded as failed rather than sinking the batch. */
function safeOutcome(error: unknown): TerminalOutcome {
  try {
    return outcomeOfError(error) as TerminalOutcome;
  } catch (unknown) {
    return { status: 'failed', reason: (unknown as Error).message ?? String(unknown) };
  }
}

/** What the uploads of one batch share: where outcomes go, and the nodes created so far by position. */
interface Uploads {
  db: Db;
  client: OsmApiClient;
  exporter: OsmExporter;
  batchId: number;
  outcomes: Map<number, TerminalOutcome>;
  changes: Map<number, number>;
  /** Shareable nodes this batch created, position → real id: a later changeset references them. */
  created: Map<string, number>;
  log: Logger;
}
type Item = { row: ClaimedRow; part: BatchPart };

/**
 * The parts in changesets of at most `maxChanges` changes (a part larger than that alone is refused:
 * OSM would close its changeset half-way). Parts sharing created nodes go in one changeset when they
 * fit (batch.ts groupParts); where they cannot, a later changeset references the nodes an earlier
 * one created instead of creating them again. Each changeset's comment names exactly the parts it
 * holds; every changeset opened here is closed on every path.
 */
async function uploadBatch(uploads: Omit<Uploads, 'created'>, prepared: readonly Item[], maxChanges: number): Promise<void> {
  const fitting = prepared.filter((item) => {
    const n = changeCount(item.part.change);
    if (n <= maxChanges) return true;
    uploads.outcomes.set(item.row.id, { status: 'failed', reason: `the change has ${n} elements, more than the ${maxChanges} one changeset may hold; split the feature` });
    return false;
  });
  const shared: Uploads = { ...uploads, created: new Map() };
  for (const group of groupParts(fitting, maxChanges)) await uploadGroup(shared, group, 0);
}

/** One changeset for `prepared`: journaled, uploaded, closed. A changeset OSM closed under us (409) is split and retried. */
async function uploadGroup(uploads: Uploads, items: readonly Item[], depth: number): Promise<void> {
  const { db, client, exporter, batchId, outcomes, changes, created, log } = uploads;
  const snapshots = (xs: readonly { row: ClaimedRow }[]): FeatureSnapshot[] => xs.map(({ row }) => row.transition.snapshot);
  // Nodes an earlier changeset of the batch created at our positions are referenced, not created again.
  const prepared = items.map((item) => ({ ...item, part: reuseCreatedNodes(item.part, created) }));
  const { parts, change } = combineParts(prepared.map(({ part }) => part));
  const changesetId = await client.createChangeset(exporter.changesetTags(snapshots(prepared)));
  let retry: Item[][] = [];
  const record = (part: BatchPart, diff: DiffResultEntry[]) => {
    const root = diff.find((d) => d.type === part.root.type && d.oldId === part.root.id);
    const id = root?.newId ?? part.root.id;
    const version = root?.newVersion ?? part.unchangedRootVersion;
    if (id < 0 || version === undefined) throw new Error(`diffResult of changeset ${changesetId} lacks the root ${part.root.type} ${part.root.id}`);
    changes.set(part.key, changeCount(part.change));
    outcomes.set(part.key, { status: 'exported', result: recordOf(part, id, version, changesetId), ...(part.detail ? { detail: part.detail } : {}) });
  };
  const remember = (uploaded: readonly BatchPart[], diff: DiffResultEntry[]) => {
    for (const [position, id] of createdNodesOf(uploaded, diff)) if (!created.has(position)) created.set(position, id);
  };
  try {
    // The journal of every part, durable before the upload (one statement, autocommit).
    await db.query(
      `WITH journaled AS (
         UPDATE qc.jobs j SET journal_changeset_id = $2::bigint, journal_plan = p.plan, updated_at = clock_timestamp()
         FROM unnest($3::bigint[], $4::jsonb[]) AS p(id, plan) WHERE j.id = p.id RETURNING j.id)
       UPDATE qc.osm_batches SET changeset_id = $2::bigint WHERE id = $1::bigint AND (SELECT count(*) FROM journaled) >= 0`,
      [batchId, changesetId, parts.map((p) => p.key), parts.map((p) => JSON.stringify(p))],
    );
    try {
      const diff = await client.upload(changesetId, change);
      remember(parts, diff);
      for (const part of parts) record(part, diff);
    } catch (error) {
      if (!(error instanceof OsmApiError)) throw error;
      if (error.status === 409 && CHANGESET_CLOSED.test(error.message) && depth < 6) {
        // Full (10 000 changes) or closed meanwhile: nothing of this upload was applied. The parts
        // go again in new changesets, halved (parts sharing nodes kept together where they fit),
        // instead of being recorded as conflicts.
        log.warn({ err: error, changesetId }, 'the changeset was closed under the upload; splitting and retrying');
        retry = items.length > 1 ? groupParts(items, Math.max(1, Math.ceil(changeCount(change) / 2))) : [[...items]];
      } else if (parts.length === 1) {
        outcomes.set(parts[0]!.key, safeOutcome(error));
      } else {
        await uploadPartsAlone();
      }
    }
  } finally {
    // Every changeset opened here is closed, whatever happened: an empty one never lingers open.
    await client.closeChangeset(changesetId).catch((error: unknown) => log.warn({ err: error, changesetId }, 'closing the changeset failed; OSM closes it when idle'));
  }
  for (const group of retry) await uploadGroup(uploads, group, depth + 1);

  async function uploadPartsAlone(): Promise<void> {
    // One part spoils the atomic upload: each part alone, into the same changeset, gets its own
    // outcome, and the comment is rewritten to name only what went up. A part uses the nodes the
    // parts before it created (the journaled plans find them in the download by position).
    log.warn({ changesetId }, 'the batch upload was refused; uploading its parts one by one');
    const uploaded: { row: ClaimedRow }[] = [];
    for (const [i, combined] of parts.entries()) {
      const part = reuseCreatedNodes(combined, created);
      try {
        const diff = await client.upload(changesetId, part.change);
        remember([part], diff);
        record(part, diff);
        uploaded.push(prepared[i]!);
      } catch (partError) {
        if (partError instanceof OsmApiError) outcomes.set(part.key, safeOutcome(partError));
        else throw partError;
      }
    }
    if (uploaded.length > 0 && uploaded.length < parts.length) await client.updateChangeset(changesetId, exporter.changesetTags(snapshots(uploaded)));
  }
}
