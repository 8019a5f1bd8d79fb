/**
 * Carries out the deploy queue (queue.ts, pure decisions) on a journal (journal.ts: the file of one
 * process, or PostgreSQL shared by every replica): each decision about a target is taken and written
 * under its lane lock, then carried out — a push is persisted before its 202, so a redelivery after a
 * crash (or to another replica) is still recognised; a deploy is recorded as running by this process
 * before the launcher starts it, and its end is recorded before the next one of its target starts.
 *
 * With a shared journal, every replica renews its lease and, each `upkeepMs`, records the deploys of
 * replicas whose lease ran out as interrupted (as a restart does for the file journal) and starts
 * what waits in a lane nobody runs. A replica that cannot renew its own lease stops its deploys.
 */
import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import type { ResolvedTarget } from '../../../shared/targets.js';
import type { Provider } from '../providers.js';
import { deployLogPath } from './invocation.js';
import type { DeploymentJournal, LaneFacts, LaneWrites } from './journal.js';
import type { LiveRelease } from './launcher.js';
import { admit, needsLiveCommit, startNext, type Admission, type Lane } from './queue.js';
import { startDeploy, type DeployOutcome, type ProcessLauncher, type RunningDeploy } from './runner.js';
import type { Deployment, DeploymentState } from './types.js';

export interface Push {
  target: ResolvedTarget;
  branch: string;
  commit: string;
  provider: Provider;
  deliveryId: string | null;
}

export type SubmitResult = Exclude<Admission, { kind: 'queued' }> | { kind: 'queued'; deployment: Deployment };

export interface DeployerOptions {
  journal: DeploymentJournal;
  logger: Logger;
  launcher: ProcessLauncher & { live(key: string): Promise<LiveRelease>; endOrphans?(): void };
  targets: readonly ResolvedTarget[];
  deployTimeoutMs: number;
  killGraceMs?: number;
  /** With a shared journal: the replica's lease; upkeep runs every third of it. */
  leaseMs?: number;
}

/** Exit code of deploy-branch.sh for a commit it refuses (not on the branch, or older than live). */
const REFUSED_EXIT_CODE = 9;
/** Retries of a deploy's end that could not be recorded: 1 s, doubling, at most a minute apart. */
const END_RETRY_MS = 1_000;
const END_RETRY_MAX_MS = 60_000;

interface Run {
  /** The deployment's id. */
  id: string;
  process: RunningDeploy | null;
  done: Promise<void>;
}

export class Deployer {
  private readonly targetsByKey: Map<string, ResolvedTarget>;
  /** Deploys this process runs, by target. */
  private readonly runs = new Map<string, Run>();
  /** Ids of the deployments this process runs or is starting: never orphans. */
  private readonly here = new Set<string>();
  private readonly retries = new Set<NodeJS.Timeout>();
  /** Lane steps under way (drain): a start they decided happens once its record is written. */
  private readonly draining = new Set<Promise<void>>();
  private stopping = false;
  private upkeepTimer: NodeJS.Timeout | undefined;
  private upkeepRunning: Promise<void> | null = null;
  private renewedAt = Date.now();

  constructor(private readonly options: DeployerOptions) {
    this.targetsByKey = new Map(options.targets.map((t) => [t.key, t]));
  }

  /** Accept a push; the deploy itself starts after the caller has answered (next tick). */
  async submit(push: Push): Promise<SubmitResult> {
    const { journal, launcher } = this.options;
    const key = push.target.key;
    const commit = push.commit.toLowerCase();
    // Decided and written under the lane lock: two pushes of one commit or one delivery id, to this
    // process or to two replicas, cannot both pass. The live commit is read only when it matters
    // (nothing runs or waits), under the lock, so no start of this target comes in between.
    let laneRunning = false;
    const decide = (lane: Lane, facts: LaneFacts, writes: LaneWrites, live?: { commit: string | null }): Admission => {
      const decided = admit(lane, commit, { ...facts, live }, () => newDeployment(push, commit));
      if (decided.kind === 'duplicate') {
        if (push.deliveryId && decided.deploymentId && decided.reason !== 'delivery') writes.recordDelivery(push.deliveryId, decided.deploymentId);
        return decided;
      }
      if (decided.superseded) writes.save(decided.superseded);
      writes.save(decided.deployment);
      if (push.deliveryId) writes.recordDelivery(push.deliveryId, decided.deployment.id);
      return decided;
    };
    const admission = await journal.inLane(key, { commit, deliveryId: push.deliveryId }, (lane, facts, writes) => {
      laneRunning = lane.running !== null;
      if (!needsLiveCommit(lane)) return decide(lane, facts, writes);
      return launcher.live(key).then((live) => decide(lane, facts, writes, { commit: live.commit }));
    });
    if (admission.kind === 'duplicate') return admission;
    if (admission.superseded) {
      this.options.logger.info({ deploymentId: admission.superseded.id, supersededBy: admission.deployment.id, target: key }, 'waiting deploy superseded');
    }
    // A deploy of the target runs: whoever runs it starts the waiting one when it ends (drain with
    // `ended`, under the same lock, so it sees this decision), or, if that replica is gone, upkeep.
    if (!laneRunning) setImmediate(() => void this.drain(key));
    return { kind: 'queued', deployment: admission.deployment };
  }

  /**
   * The next step of a target's lane, under its lock: record how `ended` ended (unless another
   * replica has recorded it as interrupted meanwhile), then start the waiting deployment when
   * nothing runs.
   */
  private drain(key: string, ended?: Deployment, attempt = 0): Promise<void> {
    // Tracked, so a shutdown waits for a start that was decided before it and has not begun yet.
    const step = this.drainLane(key, ended, attempt);
    this.draining.add(step);
    void step.finally(() => this.draining.delete(step));
    return step;
  }

  private async drainLane(key: string, ended?: Deployment, attempt = 0): Promise<void> {
    const { journal, logger } = this.options;
    const target = this.targetsByKey.get(key);
    let started: Deployment | null;
    let claimed: string | undefined;
    try {
      started = await journal.inLane(key, {}, (lane, _facts, writes) => {
        let running = lane.running;
        if (ended) {
          if (running?.id === ended.id) {
            writes.save(ended);
            running = null;
          } else {
            logger.warn({ deploymentId: ended.id, target: key, state: ended.state }, 'a deploy ended after another replica had recorded it as interrupted; its end is not recorded');
          }
        }
        // A target this process does not know is left to the replicas that do (resume()).
        if (this.stopping || !target) return null;
        const next = startNext({ running, waiting: lane.waiting }, new Date());
        if (!next) return null;
        next.logPath = deployLogPath(target, next.id, new Date(next.startedAt!));
        claimed = next.id;
        this.here.add(next.id);
        writes.save(next);
        return next;
      });
    } catch (error) {
      // Nothing of the decision was written: the lane is as it was. A deploy's end must be recorded
      // (its lane stays `running` until then), so that is tried again; a start is retried by the
      // next push, end or upkeep.
      if (claimed) this.here.delete(claimed);
      if (!ended) {
        logger.error({ err: error, target: key }, 'could not start the next deploy');
        return;
      }
      const delay = Math.min(END_RETRY_MS * 2 ** attempt, END_RETRY_MAX_MS);
      logger.error({ err: error, target: key, deploymentId: ended.id, retryInMs: delay }, 'could not record how a deploy ended; trying again');
      const timer = setTimeout(() => {
        this.retries.delete(timer);
        void this.drain(key, ended, attempt + 1);
      }, delay);
      this.retries.add(timer);
      return;
    }
    if (started && target) this.start(target, started);
  }

  private runningIds(): Set<string> {
    return new Set([...this.runs.values()].map((run) => run.id));
  }

  private start(target: ResolvedTarget, deployment: Deployment): void {
    const run: Run = { id: deployment.id, process: null, done: Promise.resolve() };
    this.runs.set(target.key, run);
    run.done = this.run(target, deployment, run)
      .catch((error: unknown): Deployment => {
        this.options.logger.error({ err: error, deploymentId: deployment.id }, 'deploy failed to run');
        // Never leave a record "running" forever: whatever broke, this deploy is over.
        return { ...deployment, state: 'failed', finishedAt: new Date().toISOString() };
      })
      .then(async (ended) => {
        this.runs.delete(target.key);
        await this.drain(target.key, ended);
        this.here.delete(deployment.id);
      });
  }

  /** Run a started deployment to its end; returns it as it ended (recorded by drain()). */
  private async run(target: ResolvedTarget, started: Deployment, run: { process: RunningDeploy | null }): Promise<Deployment> {
    const { logger } = this.options;
    const deployment = { ...started };
    const startedAt = Date.now();
    logger.info({ deploymentId: deployment.id, target: target.key, branch: deployment.branch, commit: deployment.commit }, 'deploy started');

    const child = startDeploy(
      { key: target.key, branch: deployment.branch, commit: deployment.commit, logPath: deployment.logPath! },
      { timeoutMs: this.options.deployTimeoutMs, killGraceMs: this.options.killGraceMs },
      this.options.launcher,
    );
    run.process = child;
    const outcome = await child.outcome;

    deployment.state = stateOf(outcome);
    deployment.exitCode = outcome.exitCode;
    deployment.finishedAt = new Date().toISOString();
    deployment.durationMs = Date.now() - startedAt;
    if (deployment.state === 'succeeded') {
      const live = await this.options.launcher.live(target.key);
      deployment.deployedCommit = live.commit;
      deployment.release = live.release;
    }
    const log = { deploymentId: deployment.id, target: target.key, state: deployment.state, exitCode: outcome.exitCode, durationMs: deployment.durationMs, logPath: deployment.logPath };
    if (deployment.state === 'succeeded') logger.info(log, 'deploy succeeded');
    else logger.error({ ...log, signal: outcome.signal, spawnError: outcome.spawnError }, 'deploy did not succeed');
    return deployment;
  }

  /**
   * Deployments recorded as running that no live process runs are recorded as interrupted (their
   * deploy scripts, when this host's launcher can see them, are stopped), and the waiting
   * deployment of every lane is started when nothing runs there. At start: what the previous
   * process left (a restart); with a shared journal also each upkeep: what a replica whose lease
   * ran out left. With the file journal, a waiting deployment of a target no longer configured is
   * recorded as interrupted; with a shared journal it is left to the replicas that know the target.
   */
  async resume(): Promise<void> {
    const { journal, logger } = this.options;
    const now = () => new Date().toISOString();
    let interrupted = 0;
    for (const orphan of await journal.orphans(this.here)) {
      await journal.inLane(orphan.target, {}, (lane, _facts, writes) => {
        const running = lane.running;
        if (running?.id !== orphan.id || this.here.has(running.id)) return;
        writes.save({ ...running, state: 'interrupted', finishedAt: running.finishedAt ?? now() });
        interrupted++;
        logger.warn(
          { deploymentId: running.id, target: running.target },
          journal.shared ? 'deploy was interrupted: the replica running it is gone' : 'deploy was interrupted by a restart',
        );
      });
    }
    // A deploy script a dead launcher left running on this host holds its target's lock.
    if (interrupted > 0) this.options.launcher.endOrphans?.();
    for (const key of await journal.lanesWaiting()) {
      if (this.targetsByKey.has(key)) {
        if (journal.shared) await this.drain(key);
        else setImmediate(() => void this.drain(key));
      } else if (!journal.shared) {
        await journal.inLane(key, {}, (lane, _facts, writes) => {
          if (lane.waiting) writes.save({ ...lane.waiting, state: 'interrupted', finishedAt: now() });
        });
      }
    }
    if (journal.shared && !this.upkeepTimer && !this.stopping) {
      const leaseMs = this.options.leaseMs ?? 30_000;
      this.upkeepTimer = setInterval(() => {
        this.upkeepRunning ??= this.upkeep(leaseMs).finally(() => (this.upkeepRunning = null));
      }, Math.max(100, Math.floor(leaseMs / 3)));
      this.upkeepTimer.unref();
    }
  }

  /** Renew this replica's lease (or stop its deploys when it ran out), then resume() for the others. */
  private async upkeep(leaseMs: number): Promise<void> {
    const { journal, logger } = this.options;
    let renewed: boolean;
    try {
      renewed = await journal.renew();
      if (renewed) this.renewedAt = Date.now();
    } catch (error) {
      renewed = Date.now() - this.renewedAt < leaseMs;
      logger.warn({ err: error }, 'could not renew this replica\'s lease');
    }
    if (!renewed && this.runs.size > 0) {
      // Another replica has recorded (or may record) these deploys as interrupted and may start the
      // next one of their targets: going on would run two deploys of one target at once.
      logger.error({ running: this.runs.size }, 'this replica\'s lease ran out: stopping its deploys');
      for (const run of this.runs.values()) run.process?.stop('shutdown');
    }
    if (this.stopping) return;
    try {
      await this.resume();
    } catch (error) {
      logger.warn({ err: error }, 'could not look for interrupted or waiting deploys');
    }
  }

  /**
   * Stop taking work; give running deploys `graceMs` to finish, then stop them (recorded as
   * interrupted). Waiting deploys stay queued in the journal and are resumed by the next start
   * (or, with a shared journal, by another replica).
   */
  async shutdown(graceMs: number): Promise<void> {
    this.stopping = true;
    clearInterval(this.upkeepTimer);
    for (const timer of this.retries) clearTimeout(timer);
    await this.upkeepRunning;
    let timer: NodeJS.Timeout | undefined;
    const expired = new Promise<'expired'>((resolve) => (timer = setTimeout(() => resolve('expired'), graceMs)));
    // Starts decided before `stopping` was set, still writing their record: they run, and are waited
    // for, within the same grace period.
    await Promise.race([Promise.allSettled([...this.draining]), expired]);
    const running = [...this.runs.values()];
    if (running.length === 0) return clearTimeout(timer);
    this.options.logger.info({ running: running.length, graceMs }, 'waiting for running deploys before shutdown');
    const allDone = Promise.all(running.map((r) => r.done));
    if ((await Promise.race([allDone, expired])) === 'expired') {
      for (const r of running) r.process?.stop('shutdown');
      await allDone;
    }
    clearTimeout(timer);
  }

  /** Deploys running or waiting, as far as this process can tell at once (tests and the shutdown log). */
  activity(): { running: string[]; waiting: string[] } {
    return this.options.journal.activity() ?? { running: [...this.runningIds()], waiting: [] };
  }
}

/** A new deployment of `commit` for a push, waiting (state `queued`). */
export function newDeployment(push: Pick<Push, 'branch' | 'provider' | 'deliveryId'> & { target: Pick<ResolvedTarget, 'key'> }, commit: string): Deployment {
  return {
    id: randomUUID(),
    target: push.target.key,
    branch: push.branch,
    commit,
    deployedCommit: null,
    release: null,
    provider: push.provider,
    deliveryId: push.deliveryId,
    state: 'queued',
    queuedAt: new Date().toISOString(),
    startedAt: null,
    finishedAt: null,
    durationMs: null,
    exitCode: null,
    logPath: null,
    supersededBy: null,
  };
}

function stateOf(outcome: DeployOutcome): DeploymentState {
  if (outcome.stoppedBecause === 'timeout') return 'timed-out';
  if (outcome.stoppedBecause === 'shutdown') return 'interrupted';
  if (outcome.exitCode === REFUSED_EXIT_CODE) return 'refused';
  return outcome.exitCode === 0 ? 'succeeded' : 'failed';
}
