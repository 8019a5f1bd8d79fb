/**
 * Carries out the deploy queue (queue.ts, pure transitions): gathers the facts for each decision,
 * writes every transition to the journal before answering, starts deploys through the launcher and
 * records how they end. A push is persisted before its 202, so a redelivery after a crash is still
 * recognised.
 */
import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import type { ResolvedTarget } from '../../../shared/targets.js';
import type { Provider } from '../providers.js';
import { deployLogPath } from './invocation.js';
import type { LiveRelease } from './launcher.js';
import { DeployQueue, type Admission } from './queue.js';
import { startDeploy, type DeployOutcome, type ProcessLauncher, type RunningDeploy } from './runner.js';
import type { DeploymentStore } from './store.js';
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
  store: DeploymentStore;
  logger: Logger;
  launcher: ProcessLauncher & { live(key: string): Promise<LiveRelease> };
  targets: readonly ResolvedTarget[];
  deployTimeoutMs: number;
  killGraceMs?: number;
}

/** Exit code of deploy-branch.sh for a commit it refuses (not on the branch, or older than live). */
const REFUSED_EXIT_CODE = 9;

export class Deployer {
  readonly queue = new DeployQueue();
  private readonly targetsByKey: Map<string, ResolvedTarget>;
  private readonly runs = new Map<string, { process: RunningDeploy | null; done: Promise<void> }>();
  private stopping = false;

  constructor(private readonly options: DeployerOptions) {
    this.targetsByKey = new Map(options.targets.map((t) => [t.key, t]));
  }

  /** Accept a push; the deploy itself starts after the caller has answered (next tick). */
  async submit(push: Push): Promise<SubmitResult> {
    const { store } = this.options;
    const key = push.target.key;
    const commit = push.commit.toLowerCase();
    // Each pass decides without awaiting, so two concurrent pushes of one commit or one delivery
    // id cannot both pass; when the live commit had to be read first, it decides again on what
    // is true after the read.
    let live: { commit: string | null } | undefined;
    let admission: Admission;
    for (;;) {
      if (this.queue.needsLiveCommit(key) && live === undefined) {
        live = { commit: (await this.options.launcher.live(key)).commit };
        continue;
      }
      admission = this.queue.admit(
        key,
        commit,
        {
          seenDelivery: push.deliveryId ? store.deploymentOfDelivery(push.deliveryId) : undefined,
          live,
          deployedBefore: store.succeededWith(key, commit),
          previous: store.latestWith(key, commit),
        },
        () => newDeployment(push, commit),
      );
      break;
    }
    if (admission.kind === 'duplicate') {
      if (push.deliveryId && admission.deploymentId && admission.reason !== 'delivery') await store.recordDelivery(push.deliveryId, admission.deploymentId);
      return admission;
    }
    const writes: Promise<void>[] = [];
    if (admission.superseded) {
      writes.push(store.save(admission.superseded));
      this.options.logger.info({ deploymentId: admission.superseded.id, supersededBy: admission.deployment.id, target: key }, 'waiting deploy superseded');
    }
    writes.push(store.save(admission.deployment));
    if (push.deliveryId) writes.push(store.recordDelivery(push.deliveryId, admission.deployment.id));
    await Promise.all(writes);
    setImmediate(() => this.drain(key));
    return { kind: 'queued', deployment: admission.deployment };
  }

  private drain(key: string): void {
    if (this.stopping) return;
    const target = this.targetsByKey.get(key);
    const deployment = this.queue.startNext(key, new Date());
    if (!deployment) return;
    const run = { process: null as RunningDeploy | null, done: Promise.resolve() };
    this.runs.set(key, run);
    run.done = (target ? this.run(target, deployment, run) : Promise.reject(new Error(`no target ${key}`)))
      .catch(async (error: unknown) => {
        this.options.logger.error({ err: error, deploymentId: deployment.id }, 'deploy failed to run');
        // Never leave a record "running" forever: whatever broke, this deploy is over.
        deployment.state = 'failed';
        deployment.finishedAt = new Date().toISOString();
        await this.options.store.save(deployment).catch(() => undefined);
      })
      .finally(() => {
        this.runs.delete(key);
        this.queue.finish(key, deployment);
        this.drain(key);
      });
  }

  private async run(target: ResolvedTarget, deployment: Deployment, run: { process: RunningDeploy | null }): Promise<void> {
    const { store, logger } = this.options;
    const startedAt = Date.now();
    deployment.logPath = deployLogPath(target, deployment.id, new Date(startedAt));
    await store.save(deployment);
    logger.info({ deploymentId: deployment.id, target: target.key, branch: deployment.branch, commit: deployment.commit }, 'deploy started');

    const child = startDeploy(
      { key: target.key, branch: deployment.branch, commit: deployment.commit, logPath: deployment.logPath },
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
    await store.save(deployment);
    const log = { deploymentId: deployment.id, target: target.key, state: deployment.state, exitCode: outcome.exitCode, durationMs: deployment.durationMs, logPath: deployment.logPath };
    if (deployment.state === 'succeeded') logger.info(log, 'deploy succeeded');
    else logger.error({ ...log, signal: outcome.signal, spawnError: outcome.spawnError }, 'deploy did not succeed');
  }

  /**
   * After a restart: deployments the previous process left running are recorded as interrupted;
   * the newest waiting one per target is started again, older ones are superseded.
   */
  async resume(): Promise<void> {
    const { store, logger } = this.options;
    const waitingByTarget = new Map<string, Deployment>();
    for (const deployment of store.all()) {
      if (deployment.state === 'running') {
        await store.save({ ...deployment, state: 'interrupted', finishedAt: deployment.finishedAt ?? new Date().toISOString() });
        logger.warn({ deploymentId: deployment.id, target: deployment.target }, 'deploy was interrupted by a restart');
      } else if (deployment.state === 'queued') {
        const older = waitingByTarget.get(deployment.target);
        if (older) await store.save({ ...older, state: 'superseded', supersededBy: deployment.id, finishedAt: new Date().toISOString() });
        waitingByTarget.set(deployment.target, deployment);
      }
    }
    for (const [key, deployment] of waitingByTarget) {
      if (!this.targetsByKey.has(key)) {
        await store.save({ ...deployment, state: 'interrupted', finishedAt: new Date().toISOString() });
        continue;
      }
      this.queue.restoreWaiting(key, { ...deployment });
      setImmediate(() => this.drain(key));
    }
  }

  /**
   * Stop taking work; give running deploys `graceMs` to finish, then stop them (recorded as
   * interrupted). Waiting deploys stay queued in the store and are resumed by the next start.
   */
  async shutdown(graceMs: number): Promise<void> {
    this.stopping = true;
    const running = [...this.runs.values()];
    if (running.length === 0) return;
    this.options.logger.info({ running: running.length, graceMs }, 'waiting for running deploys before shutdown');
    const allDone = Promise.all(running.map((r) => r.done));
    let timer: NodeJS.Timeout | undefined;
    const expired = new Promise<'expired'>((resolve) => (timer = setTimeout(() => resolve('expired'), graceMs)));
    if ((await Promise.race([allDone, expired])) === 'expired') {
      for (const r of running) r.process?.stop('shutdown');
      await allDone;
    }
    clearTimeout(timer);
  }

  activity(): { running: string[]; waiting: string[] } {
    return this.queue.activity();
  }
}

function newDeployment(push: Push, commit: string): Deployment {
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
