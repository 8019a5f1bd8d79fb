import type { JobHelpers, TaskList } from 'graphile-worker';
import type { Logger } from 'pino';
import { computeAgencyChangeset } from '../../exports/agency/changeset.js';
import { AgencyNotifier } from '../../exports/agency/notifier.js';
import { osmSkipped } from '../../exports/osm/exporter.js';
import { WikibaseExporter, wikibaseSkipped, type WikibaseExportRecord } from '../../exports/wikibase/exporter.js';
import { ReviewerNotifier } from '../../notifications/reviewer-notice.js';
import { addGraphileJob, queueForRelay } from '../queries.js';
import { BATCH_TASK_IDENTIFIER, JOB_TASKS, TASK_IDENTIFIERS, type JobTask } from '../states.js';
import {
  finishAttempt,
  finishAttempts,
  loadCategoryMapping,
  markRetrying,
  reviewerAddresses,
  startAttempt,
  startAttempts,
  userEmail,
  type FinishedJob,
  type JobContext,
  type TerminalOutcome,
} from './context.js';
import { createPostgresJournal } from './journal.js';
import { eachLimited, runOsmExportBatch } from './osm-batch.js';
import { RELAY_LIMIT } from './relay.js';
import type { TaskDeps } from './task-deps.js';

type Helpers = Pick<JobHelpers, 'job'>;
/** A runner returns an outcome to record, or `deferred` when it put the job back for later itself. */
type Runner = (job: JobContext, deps: TaskDeps, helpers: Helpers) => Promise<{ outcome: TerminalOutcome; recordTarget: 'osm' | 'wikibase' | null } | 'deferred'>;

/** Every task but osm_export, which runs in batches (runOsmExportAttempt). */
const RUNNERS: Record<Exclude<JobTask, 'osm_export'>, Runner> = {
  async reviewer_notice(job, deps) {
    const { snapshot, actor, actorName, comment, at } = job.transition;
    const outcome = await new ReviewerNotifier({ settings: deps.settings, mailer: deps.mailer }).notify({
      feature: { id: snapshot.id, name: snapshot.name, kategorie: snapshot.kategorie, version: snapshot.version },
      submitter: { name: actorName ?? actor, email: await userEmail(deps.db, actor) },
      comment,
      submittedAt: at,
      reviewerEmails: await reviewerAddresses(deps.db),
      submissionId: String(job.transition.id),
    });
    return { outcome: outcome.status === 'sent' ? { status: 'sent', result: outcome } : outcome, recordTarget: null };
  },

  async wikibase_export(job, deps) {
    // Not configured: nothing to read for it (the category mapping is read only for an export that can go).
    const skipped = wikibaseSkipped(deps.settings);
    if (skipped) return { outcome: skipped, recordTarget: 'wikibase' };
    const exporter = new WikibaseExporter({ settings: deps.settings, mapping: await loadCategoryMapping(deps.db, deps.settings.osm.tagMapping) });
    const outcome = await exporter.export({
      snapshot: job.transition.snapshot,
      osmLink: job.osmLink ?? null,
      previous: (job.wikibaseRecord ?? null) as WikibaseExportRecord | null,
      journal: createPostgresJournal(deps.db, job.id),
    });
    return { outcome, recordTarget: 'wikibase' };
  },

  async agency_notice(job, deps) {
    const { snapshot, actor, actorName, at } = job.transition;
    const changeset = computeAgencyChangeset(job.previousApproval ?? null, snapshot, {
      reviewer: { id: actor, name: actorName },
      approvedAt: at,
    });
    const notifier = new AgencyNotifier({ settings: deps.settings, mailer: deps.mailer, ...(deps.clock ? { clock: deps.clock } : {}) });
    const outcome = await notifier.notify(changeset);
    return { outcome: outcome.status === 'sent' ? { status: 'sent', result: outcome } : outcome, recordTarget: null };
  },
};

/**
 * One attempt of a side effect. A terminal outcome is recorded and the graphile job completes; a
 * transient failure marks the job `retrying` and throws, so graphile-worker retries it with
 * exponential backoff — until its last attempt, which is recorded as `failed` instead of thrown.
 */
export async function runJobAttempt(task: JobTask, payload: unknown, helpers: Helpers, deps: TaskDeps): Promise<void> {
  const jobId = Number((payload as { jobId?: unknown } | null)?.jobId);
  if (!Number.isSafeInteger(jobId)) {
    deps.logger.error({ task, payload }, 'QC job without a valid jobId; dropped');
    return;
  }
  if (task === 'osm_export') return runOsmExportAttempt(jobId, helpers, deps);
  let job = await startAttempt(deps.db, jobId, deps.processId, helpers.job.locked_by);
  // A Wikibase export is not started while the OSM export of its approval is on its way: put back,
  // unless that export finished between the two reads.
  if (!job && task === 'wikibase_export') {
    if (await waitForOsmExport(jobId, helpers, deps)) return;
    job = await startAttempt(deps.db, jobId, deps.processId, helpers.job.locked_by);
  }
  if (!job) {
    deps.logger.info({ jobId, task }, 'QC job already finished; nothing to do');
    return;
  }
  const log = deps.logger.child({ jobId, task, featureId: job.featureId, version: job.version, attempt: helpers.job.attempts });
  try {
    const ran = await RUNNERS[task](job, deps, helpers);
    if (ran === 'deferred') {
      log.info('QC job deferred by the OSM edit limit');
      return;
    }
    const { outcome, recordTarget } = ran;
    await finishAttempt(deps.db, job, outcome, recordTarget);
    if (task === 'wikibase_export' && (outcome.status === 'exported' || outcome.status === 'unchanged')) await queueWikidataLinkBack(job, (outcome.result as WikibaseExportRecord).itemId, deps);
    log.info({ status: outcome.status, reason: 'reason' in outcome ? outcome.reason : undefined }, 'QC job finished');
  } catch (error) {
    const failed = await failedOrRetrying(deps, job.id, error, helpers, log);
    if (!failed) throw error;
    await finishAttempt(deps.db, job, failed, null);
  }
}

/**
 * After an attempt's transient failure: on the job's last attempt the outcome to record (`failed`,
 * with the reason); otherwise null, and the job is marked `retrying` for graphile's retry with backoff.
 */
async function failedOrRetrying(deps: TaskDeps, jobId: number, error: unknown, helpers: Helpers, log: Logger): Promise<TerminalOutcome | null> {
  const message = (error as Error).message ?? String(error);
  if (helpers.job.attempts >= helpers.job.max_attempts) {
    log.error({ err: error }, 'QC job failed on its last attempt');
    return { status: 'failed', reason: `gave up after ${helpers.job.attempts} attempts: ${message}` };
  }
  await markRetrying(deps.db, jobId, message);
  log.warn({ err: error }, 'QC job failed; graphile-worker retries it with backoff');
  return null;
}

/**
 * The link back from OSM: when the Wikibase export made or found the feature's item and the OSM
 * element (as the platform last wrote it) does not carry it yet, an OSM export of the same approval
 * is queued (through the outbox) to write `wikidata=<item>` — planned, merged three ways and reviewed
 * like any other. Only for the feature's latest approval (an older snapshot is never exported again),
 * and not while another OSM export of the feature is on its way.
 */
async function queueWikidataLinkBack(job: JobContext, itemId: string, deps: TaskDeps): Promise<void> {
  if (!deps.settings.osm.wikidataLinkBack || !/^Q[1-9]\d*$/.test(itemId)) return;
  const { rowCount } = await deps.db.query(
    `WITH job AS (
       INSERT INTO qc.jobs (transition_id, feature_id, version, task, max_attempts, relayed_at)
       SELECT w.transition_id, w.feature_id, w.version, 'osm_export', w.max_attempts, clock_timestamp()
       FROM qc.jobs w JOIN qc.export_records r ON r.feature_id = w.feature_id AND r.target = 'osm'
       WHERE w.id = $1::bigint
         AND coalesce(r.record->'tags'->>'wikidata', '') <> $2::text
         AND w.version = (SELECT max(t.version) FROM qc.transitions t WHERE t.feature_id = w.feature_id AND t.action = 'approve')
         AND NOT EXISTS (SELECT 1 FROM qc.jobs o WHERE o.feature_id = w.feature_id AND o.task = 'osm_export' AND o.status IN ('queued', 'running', 'retrying', 'needs_decision'))
       RETURNING id
     )
     ${queueForRelay('job')}`,
    [job.id, itemId],
  );
  if (rowCount) deps.logger.info({ jobId: job.id, featureId: job.featureId, itemId }, 'queued an OSM export writing wikidata= (the link back)');
}

/**
 * The Wikibase export of an approval runs after its OSM export, in order: it reads the OSM link
 * (P402, the element's wikidata tag) the OSM export leaves. While that export is queued, running,
 * retrying or waiting for a reviewer, the Wikibase job is put back (no attempt used) and looks again
 * after a tenth of its age, between 2 s and 10 min. Answers true when it was put back.
 */
async function waitForOsmExport(jobId: number, helpers: Helpers, deps: TaskDeps): Promise<boolean> {
  const { rows } = await deps.db.query(
    `SELECT o.status AS "osmStatus", extract(epoch FROM clock_timestamp() - w.created_at) AS "ageSeconds"
     FROM qc.jobs w JOIN qc.jobs o ON o.feature_id = w.feature_id AND o.transition_id = w.transition_id AND o.task = 'osm_export'
     WHERE w.id = $1::bigint AND w.status IN ('queued', 'retrying')`,
    [jobId],
  );
  const row = rows[0] as { osmStatus: string; ageSeconds: number } | undefined;
  if (!row || !['queued', 'running', 'retrying', 'needs_decision'].includes(row.osmStatus)) return false;
  const delayMs = Math.min(600_000, Math.max(2_000, (Number(row.ageSeconds) * 1000) / 10));
  const again = addGraphileJob(jobId, TASK_IDENTIFIERS.wikibase_export, true, new Date(Date.now() + delayMs), helpers.job.max_attempts);
  await deps.db.query(again.text, again.values);
  await deps.db.query(`UPDATE qc.jobs SET reason = $2::text, updated_at = clock_timestamp() WHERE id = $1::bigint`, [jobId, `waits for the OSM export of this approval (${row.osmStatus})`]);
  deps.logger.info({ jobId, osmStatus: row.osmStatus }, 'Wikibase export waits for the OSM export');
  return true;
}

/**
 * An OSM export attempt exports the job together with nearby ready ones in one changeset
 * (osm-batch.ts). A transient failure of the job's own part is retried by graphile with backoff, as
 * for every task; on the last attempt it is recorded as failed.
 */
async function runOsmExportAttempt(jobId: number, helpers: Helpers, deps: TaskDeps): Promise<void> {
  const log = deps.logger.child({ jobId, task: 'osm_export', attempt: helpers.job.attempts });
  try {
    await runOsmExportBatch(jobId, helpers, deps, log);
  } catch (error) {
    const failed = await failedOrRetrying(deps, jobId, error, helpers, log);
    if (!failed) throw error;
    await finishAttempt(deps.db, { id: jobId }, failed, null);
  }
}

/**
 * A relay round's jobs of one named queue (queries.ts relayJobs): a graphile batch job whose payload
 * lists them ({jobId, task}, in id order). Answers one promise per entry, as graphile's batch jobs
 * expect: an entry that failed transiently rejects, and graphile tries the job again with backoff
 * holding only the failed entries; the others are done.
 *
 * The jobs whose work reads nothing another job of the batch writes — the reviewers' and the
 * agency's notices, and the exports to a target that is not configured (osmSkipped, wikibaseSkipped)
 * — start in one statement, run (4 at a time) and are recorded in one statement: a round trip each
 * for the whole batch, where a job of its own took a fetch, a start, a finish and a completion. The
 * OSM exports to a configured target first (each claims its batch, osm-batch.ts), then the Wikibase
 * exports (they read the OSM link the OSM export leaves, and the feature's record the previous
 * export left) run one after the other, each an attempt as before (runJobAttempt).
 */
export async function runJobBatch(payload: unknown, helpers: Helpers, deps: TaskDeps): Promise<Promise<void>[] | undefined> {
  const entries = batchEntries(payload);
  if (!entries) {
    deps.logger.error({ payload }, 'QC batch job without a valid list of jobs; dropped');
    return undefined;
  }
  const failures = new Map<number, Error>();
  // From the settings, once: the exports that are skipped whatever the feature.
  const skippedOsm = osmSkipped(deps.settings);
  const skippedWikibase = wikibaseSkipped(deps.settings) !== null;
  const together = (task: JobTask) => (task === 'osm_export' ? skippedOsm !== null : task === 'wikibase_export' ? skippedWikibase : true);
  const oneByOne = async (task: 'osm_export' | 'wikibase_export') => {
    if (together(task)) return;
    for (const entry of entries) {
      if (entry.task !== task) continue;
      try {
        await runJobAttempt(task, { jobId: entry.jobId }, helpers, deps);
      } catch (error) {
        failures.set(entry.jobId, error as Error);
      }
    }
  };
  // OSM to a configured target first; then what runs together (skipped OSM exports among them, which a
  // skipped Wikibase export of the same approval then need not wait for); then Wikibase to a configured
  // target, which reads what the OSM export left.
  await oneByOne('osm_export');
  await runTogether(entries.filter((e) => together(e.task)), helpers, deps, failures, skippedOsm);
  await oneByOne('wikibase_export');
  return entries.map((entry) => {
    const failure = failures.get(entry.jobId);
    return failure ? Promise.reject(failure) : Promise.resolve();
  });
}

/** An OSM export reaches runTogether only when skipped; anything else is a bug, not an outcome. */
function unexpected(job: JobContext): never {
  throw new Error(`QC job ${job.id}: an OSM export to a configured target must claim its batch`);
}

interface BatchEntry {
  jobId: number;
  task: JobTask;
}

/** The payload's entries, or null when it is not a list of {jobId, task} (at most a relay round's). */
function batchEntries(payload: unknown): BatchEntry[] | null {
  if (!Array.isArray(payload) || payload.length > RELAY_LIMIT) return null;
  const entries: BatchEntry[] = [];
  for (const item of payload as unknown[]) {
    const { jobId, task } = (item ?? {}) as { jobId?: unknown; task?: unknown };
    if (typeof jobId !== 'number' || !Number.isSafeInteger(jobId) || !JOB_TASKS.includes(task as JobTask)) return null;
    entries.push({ jobId, task: task as JobTask });
  }
  return entries;
}

/**
 * One attempt of each of `entries` (notices, and exports that are skipped: nothing they do reads or
 * writes another job's record), started in one statement and recorded in one.
 * A Wikibase export not started because the OSM export of its approval is on its way is put back
 * (waitForOsmExport), as alone. A transient failure marks its job `retrying` and goes into `failures`
 * (on the batch's last attempt it is recorded as `failed` instead).
 */
async function runTogether(entries: readonly BatchEntry[], helpers: Helpers, deps: TaskDeps, failures: Map<number, Error>, skippedOsm: TerminalOutcome | null): Promise<void> {
  if (entries.length === 0) return;
  const started = await startAttempts(deps.db, entries.map((e) => e.jobId), deps.processId, helpers.job.locked_by, skippedOsm !== null);
  for (const entry of entries) {
    if (started.has(entry.jobId)) continue;
    if (entry.task === 'wikibase_export' && !(await waitForOsmExport(entry.jobId, helpers, deps))) {
      const job = await startAttempt(deps.db, entry.jobId, deps.processId, helpers.job.locked_by);
      if (job) started.set(entry.jobId, job);
    }
  }
  const finished: FinishedJob[] = [];
  await eachLimited([...started.values()], 4, async (job) => {
    const task = job.task;
    const log = deps.logger.child({ jobId: job.id, task, featureId: job.featureId, version: job.version, attempt: helpers.job.attempts });
    try {
      const ran = task === 'osm_export' ? { outcome: skippedOsm ?? unexpected(job), recordTarget: null } : await RUNNERS[task](job, deps, helpers);
      if (ran === 'deferred') return;
      finished.push({ id: job.id, outcome: ran.outcome, recordTarget: ran.recordTarget });
      log.info({ status: ran.outcome.status, reason: 'reason' in ran.outcome ? ran.outcome.reason : undefined }, 'QC job finished');
    } catch (error) {
      const failed = await failedOrRetrying(deps, job.id, error, helpers, log);
      if (failed) finished.push({ id: job.id, outcome: failed, recordTarget: null });
      else failures.set(job.id, error as Error);
    }
  });
  await finishAttempts(deps.db, finished);
}

export function qcTaskList(deps: TaskDeps): TaskList {
  const list: TaskList = { [BATCH_TASK_IDENTIFIER]: (payload, helpers) => runJobBatch(payload, helpers, deps) };
  for (const [task, identifier] of Object.entries(TASK_IDENTIFIERS) as [JobTask, string][]) {
    list[identifier] = (payload, helpers) => runJobAttempt(task, payload, helpers, deps);
  }
  return list;
}
