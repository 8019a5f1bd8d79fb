import type { JobHelpers, TaskList } from 'graphile-worker';
import type { Logger } from 'pino';
import type { Db } from '../../db/pool.js';
import { computeAgencyChangeset } from '../../exports/agency/changeset.js';
import { AgencyNotifier } from '../../exports/agency/notifier.js';
import type { ExportsSettings } from '../../exports/config.js';
import { OsmExporter, type OsmExportRecord } from '../../exports/osm/exporter.js';
import { WikibaseExporter, type WikibaseExportRecord } from '../../exports/wikibase/exporter.js';
import type { Mailer } from '../../notifications/mailer.js';
import { ReviewerNotifier } from '../../notifications/reviewer-notice.js';
import { TASK_IDENTIFIERS, queueNameOf, type JobTask } from '../states.js';
import {
  deferAttempt,
  exportRecord,
  osmLinkOf,
  recentOsmEdits,
  finishAttempt,
  loadCategoryMapping,
  markRetrying,
  previousApproval,
  reviewerAddresses,
  startAttempt,
  userEmail,
  type JobContext,
  type TerminalOutcome,
} from './context.js';
import { createPostgresJournal } from './journal.js';

export interface TaskDeps {
  db: Db;
  settings: ExportsSettings;
  /** null when SMTP_URL is unset (mail jobs are recorded as skipped). */
  mailer: Mailer | null;
  logger: Logger;
  /** This worker process, as registered in qc.worker_processes. */
  processId: string;
  clock?: () => Date;
}

type Helpers = Pick<JobHelpers, 'job' | 'addJob'>;
/** A runner returns an outcome to record, or `deferred` when it put the job back for later itself. */
type Runner = (job: JobContext, deps: TaskDeps, helpers: Helpers) => Promise<{ outcome: TerminalOutcome; recordTarget: 'osm' | 'wikibase' | null } | 'deferred'>;

const RUNNERS: Record<JobTask, Runner> = {
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

  async osm_export(job, deps, helpers) {
    // The edit limit (OSM_MAX_EDITS_PER_HOUR): over it, the job waits, without using up an attempt.
    const { count, windowFreesAt } = await recentOsmEdits(deps.db);
    const limit = deps.settings.osm.changeset.maxEditsPerHour;
    if (count >= limit && deps.settings.osm.accessToken) {
      const runAt = new Date(Math.max((windowFreesAt ?? new Date()).getTime(), Date.now() + 1000));
      // The later run is queued first: a crash between the two leaves a job that runs twice (harmless:
      // the second finds it finished), never a queued row without a graphile job.
      await helpers.addJob(TASK_IDENTIFIERS.osm_export, { jobId: job.id }, { queueName: queueNameOf('osm_export', job.featureId) ?? undefined, runAt, maxAttempts: helpers.job.max_attempts });
      await deferAttempt(deps.db, job.id, `OSM edit limit of ${limit} per hour reached; waits until ${runAt.toISOString()}`);
      return 'deferred';
    }
    const exporter = new OsmExporter({ settings: deps.settings, mapping: await loadCategoryMapping(deps.db, deps.settings.osm.tagMapping) });
    const outcome = await exporter.export({
      snapshot: job.transition.snapshot,
      previous: await exportRecord<OsmExportRecord>(deps.db, job.featureId, 'osm'),
      journal: createPostgresJournal(deps.db, job.id),
    });
    return { outcome, recordTarget: 'osm' };
  },

  async wikibase_export(job, deps) {
    const exporter = new WikibaseExporter({ settings: deps.settings, mapping: await loadCategoryMapping(deps.db, deps.settings.osm.tagMapping) });
    const outcome = await exporter.export({
      snapshot: job.transition.snapshot,
      osmLink: await osmLinkOf(deps.db, job.featureId),
      previous: await exportRecord<WikibaseExportRecord>(deps.db, job.featureId, 'wikibase'),
      journal: createPostgresJournal(deps.db, job.id),
    });
    return { outcome, recordTarget: 'wikibase' };
  },

  async agency_notice(job, deps) {
    const { snapshot, actor, actorName, at } = job.transition;
    const changeset = computeAgencyChangeset(await previousApproval(deps.db, job.featureId, job.transition.id), snapshot, {
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
  const job = await startAttempt(deps.db, jobId, deps.processId, helpers.job.locked_by);
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
    log.info({ status: outcome.status, reason: 'reason' in outcome ? outcome.reason : undefined }, 'QC job finished');
  } catch (error) {
    const message = (error as Error).message ?? String(error);
    if (helpers.job.attempts >= helpers.job.max_attempts) {
      await finishAttempt(deps.db, job, { status: 'failed', reason: `gave up after ${helpers.job.attempts} attempts: ${message}` }, null);
      log.error({ err: error }, 'QC job failed on its last attempt');
      return;
    }
    await markRetrying(deps.db, job.id, message);
    log.warn({ err: error }, 'QC job failed; graphile-worker retries it with backoff');
    throw error;
  }
}

export function qcTaskList(deps: TaskDeps): TaskList {
  const list: TaskList = {};
  for (const [task, identifier] of Object.entries(TASK_IDENTIFIERS) as [JobTask, string][]) {
    list[identifier] = (payload, helpers) => runJobAttempt(task, payload, helpers, deps);
  }
  return list;
}
