/**
 * The deploy queue as pure state transitions: no files, no processes, no clock of its own. One lane
 * per target: at most one deployment runs, at most one waits; a newer push replaces the waiting one
 * (collapse to the newest commit). The Deployer (deployer.ts) gathers the facts a decision needs
 * (delivery ids seen, what is live, what was deployed before), applies the transitions and carries
 * out their effects (journal, launcher).
 *
 * Admission rules, in order (the first that applies wins):
 *   1. a delivery id seen before                       → duplicate `delivery`
 *   2. the commit is waiting                           → duplicate `queued`
 *   3. the commit is running (whether or not another   → duplicate `running`
 *      commit waits)
 *   4. a deployment runs or waits, and an earlier push → duplicate `superseded`, naming the
 *      of this commit was superseded by a newer one      deployment that runs next
 *   5. the lane is idle and the commit is live         → duplicate `live`
 *   6. the commit was deployed successfully before     → duplicate `deployed-before` (a replayed or
 *      (and is not live): deploying it again would       old push never rolls a target back)
 *      roll the target back
 *   7. otherwise                                       → queued; a waiting deployment is superseded
 *
 * Only a push of a commit the target has never seen (rule 7) can supersede a waiting deployment.
 * Rules 3 and 4 keep a replay — the same payload with a fresh delivery id, or a stale redelivery —
 * of a commit that is already running, or that a newer push has already replaced, from displacing
 * the newer commit that waits: the waiting commit is the newest push, and a replay is not newer.
 */
import type { Deployment } from './types.js';

export type DuplicateReason = 'delivery' | 'queued' | 'running' | 'superseded' | 'live' | 'deployed-before';

export type Admission =
  | { kind: 'duplicate'; reason: DuplicateReason; deploymentId: string | null }
  | { kind: 'queued'; deployment: Deployment; superseded: Deployment | null };

/** What the Deployer found out before asking; `live` only when the lane is idle (needsLiveCommit). */
export interface AdmissionFacts {
  seenDelivery?: string;
  live?: { commit: string | null };
  /** The newest successful deployment of this commit on this target. */
  deployedBefore?: Deployment;
  /** The most recently changed deployment of this commit on this target, in any state. */
  previous?: Deployment;
}

export interface Lane {
  running: Deployment | null;
  waiting: Deployment | null;
}

export class DeployQueue {
  private readonly lanes = new Map<string, Lane>();

  private lane(key: string): Lane {
    let lane = this.lanes.get(key);
    if (!lane) {
      lane = { running: null, waiting: null };
      this.lanes.set(key, lane);
    }
    return lane;
  }

  /** True when the live commit matters for a push to this target (nothing runs or waits). */
  needsLiveCommit(key: string): boolean {
    const lane = this.lane(key);
    return !lane.running && !lane.waiting;
  }

  /**
   * Decide a push. `create` makes the new deployment (only called when one is queued). Throws when
   * the lane is idle and `facts.live` is missing: the caller must look first.
   */
  admit(key: string, commit: string, facts: AdmissionFacts, create: () => Deployment): Admission {
    const lane = this.lane(key);
    if (facts.seenDelivery) return { kind: 'duplicate', reason: 'delivery', deploymentId: facts.seenDelivery };
    if (lane.waiting?.commit === commit) return { kind: 'duplicate', reason: 'queued', deploymentId: lane.waiting.id };
    if (lane.running?.commit === commit) return { kind: 'duplicate', reason: 'running', deploymentId: lane.running.id };
    const next = lane.waiting ?? lane.running;
    if (next) {
      if (facts.previous?.state === 'superseded') return { kind: 'duplicate', reason: 'superseded', deploymentId: next.id };
    } else {
      if (!facts.live) throw new Error('the live commit is needed for an idle lane');
      if (facts.live.commit === commit) return { kind: 'duplicate', reason: 'live', deploymentId: facts.deployedBefore?.id ?? null };
    }
    if (facts.deployedBefore) {
      return { kind: 'duplicate', reason: 'deployed-before', deploymentId: facts.deployedBefore.id };
    }
    const deployment = create();
    const superseded = lane.waiting;
    if (superseded) {
      superseded.state = 'superseded';
      superseded.supersededBy = deployment.id;
      superseded.finishedAt = deployment.queuedAt;
    }
    lane.waiting = deployment;
    return { kind: 'queued', deployment, superseded };
  }

  /** Waiting → running, when nothing runs; returns the deployment to start (state `running`). */
  startNext(key: string, now: Date): Deployment | null {
    const lane = this.lane(key);
    if (lane.running || !lane.waiting) return null;
    const deployment = lane.waiting;
    lane.waiting = null;
    lane.running = deployment;
    deployment.state = 'running';
    deployment.startedAt = now.toISOString();
    return deployment;
  }

  /** Running → free; the deployment's final state is recorded by the caller. */
  finish(key: string, deployment: Deployment): void {
    const lane = this.lane(key);
    if (lane.running === deployment) lane.running = null;
  }

  /** After a restart: the deployment left waiting by the previous process waits again. */
  restoreWaiting(key: string, deployment: Deployment): void {
    this.lane(key).waiting = deployment;
  }

  running(key: string): Deployment | null {
    return this.lane(key).running;
  }

  /** Deploys running or waiting right now (for tests and the shutdown log). */
  activity(): { running: string[]; waiting: string[] } {
    const lanes = [...this.lanes.values()];
    return {
      running: lanes.flatMap((l) => (l.running ? [l.running.id] : [])),
      waiting: lanes.flatMap((l) => (l.waiting ? [l.waiting.id] : [])),
    };
  }
}
