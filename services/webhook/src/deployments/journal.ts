/**
 * What the Deployer needs of a journal, kept by two stores with one queue logic (queue.ts, deployer.ts):
 * - file-journal.ts: the JSONL file of one webhook process (store.ts), the single-host default;
 * - postgres-journal.ts: PostgreSQL (WEBHOOK_DATABASE_URL), shared by every replica, so that two
 *   or more webhook processes on one database behave as one.
 *
 * Glossary
 * - lane lock: held while one decision about a target is taken and written (a push admitted, a
 *   deploy started or ended): an in-process lock per target (file), a transaction-scoped advisory
 *   lock per target (PostgreSQL). No other decision about that target, in any process, interleaves.
 * - replica: one webhook process on the shared journal; it holds a lease it renews, and the
 *   deployments it runs are recorded as its own.
 * - orphan: a deployment recorded as running that no live process runs (the process that ran it was
 *   killed or restarted, or a replica's lease ran out).
 */
import type { Lane } from './queue.js';
import type { Deployment } from './types.js';

/** Facts about one commit and one delivery id, read together with the lane. */
export interface LaneFacts {
  seenDelivery?: string;
  /** The newest successful deployment of this commit on this target. */
  deployedBefore?: Deployment;
  /** The most recently changed deployment of this commit on this target, in any state. */
  previous?: Deployment;
}

/** What a decision writes; written in this order, together, before the lane lock is let go. */
export interface LaneWrites {
  save(deployment: Deployment): void;
  recordDelivery(deliveryId: string, deploymentId: string): void;
}

export interface DeploymentJournal {
  /** Several processes share this journal (and so deploys a process does not know of may run). */
  readonly shared: boolean;
  get(id: string): Promise<Deployment | undefined>;
  /** Newest change first. */
  list(filter?: { target?: string; limit?: number }): Promise<Deployment[]>;
  /**
   * Take one decision about a target's lane: `work` gets the lane and the facts about `about` read
   * under the lane lock, and what it writes is written (all or nothing) before the lock is let go
   * and the returned promise resolves. A write that fails rejects, and nothing of it is kept.
   */
  inLane<T>(
    key: string,
    about: { commit?: string; deliveryId?: string | null },
    work: (lane: Lane, facts: LaneFacts, writes: LaneWrites) => Promise<T> | T,
  ): Promise<T>;
  /** Deployments recorded as running that no live process runs; `runningHere`: what this process runs. */
  orphans(runningHere: ReadonlySet<string>): Promise<Deployment[]>;
  /** Targets with a deployment waiting. */
  lanesWaiting(): Promise<string[]>;
  /**
   * Renew this process' claim on the deploys it runs (the replica's lease); false when another
   * replica had found it expired and recorded them as interrupted. Always true for the file.
   */
  renew(): Promise<boolean>;
  /** What runs and waits, as this process can tell at once (tests, the shutdown log); null when it cannot. */
  activity(): { running: string[]; waiting: string[] } | null;
  close(): Promise<void>;
}
