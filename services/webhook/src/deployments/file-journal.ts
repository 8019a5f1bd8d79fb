/**
 * The file journal (store.ts) as the Deployer's journal, for a webhook that runs as one process: the
 * lane lock is a promise chain per target in this process, held while a decision is taken. What it
 * writes is applied at once and joins the store's open batch (group commit), so the next decision
 * of the target neither waits for the file nor misses it; the caller learns the outcome once
 * everything the decision read or wrote is written, and if some of it could not be, it gets that
 * error as if its own write had failed (store.ts, rollBack).
 */
import type { Logger } from 'pino';
import type { DeploymentJournal, LaneFacts, LaneWrites } from './journal.js';
import type { Lane } from './queue.js';
import { DeploymentStore, type DeploymentStoreOptions } from './store.js';
import type { Deployment } from './types.js';

interface Decided<T> {
  result: T;
  written: Promise<void>;
}

export class FileJournal implements DeploymentJournal {
  readonly shared = false;
  private readonly locks = new Map<string, Promise<unknown>>();

  private constructor(readonly store: DeploymentStore) {}

  /**
   * Open `<dir>/deployments.jsonl`. A journal torn between two writes may hold more than one waiting
   * deployment of a target: the newest waits, older ones are recorded as superseded by it.
   */
  static async open(dir: string, logger: Logger, options: DeploymentStoreOptions = {}): Promise<FileJournal> {
    const store = await DeploymentStore.open(dir, logger, options);
    for (const deployment of store.all()) {
      const waiting = store.lane(deployment.target).waiting;
      if (deployment.state === 'queued' && waiting && waiting.id !== deployment.id) {
        await store.save({ ...deployment, state: 'superseded', supersededBy: waiting.id, finishedAt: new Date().toISOString() });
      }
    }
    return new FileJournal(store);
  }

  async get(id: string): Promise<Deployment | undefined> {
    return this.store.get(id);
  }

  async list(filter: { target?: string; limit?: number } = {}): Promise<Deployment[]> {
    return this.store.list(filter);
  }

  async inLane<T>(
    key: string,
    about: { commit?: string; deliveryId?: string | null },
    work: (lane: Lane, facts: LaneFacts, writes: LaneWrites) => Promise<T> | T,
  ): Promise<T> {
    // The lock: this decision is taken when the previous one of the target is (whatever its
    // outcome), not when that one's lines are written. A free lane decides at once.
    const previous = this.locks.get(key);
    const decide = () => this.decide(key, about, work);
    const turn = previous ? previous.then(decide, decide) : decide();
    this.locks.set(key, turn);
    try {
      const { result, written } = await turn;
      await written;
      return result;
    } finally {
      if (this.locks.get(key) === turn) this.locks.delete(key);
    }
  }

  /** One decision under the lane lock; a `work` that does not wait is taken without waiting. */
  private decide<T>(
    key: string,
    about: { commit?: string; deliveryId?: string | null },
    work: (lane: Lane, facts: LaneFacts, writes: LaneWrites) => Promise<T> | T,
  ): Promise<Decided<T>> {
    const { store } = this;
    const facts: LaneFacts = {
      seenDelivery: about.deliveryId ? store.deploymentOfDelivery(about.deliveryId) : undefined,
      deployedBefore: about.commit ? store.succeededWith(key, about.commit) : undefined,
      previous: about.commit ? store.latestWith(key, about.commit) : undefined,
    };
    const changes: ({ deployment: Deployment } | { deliveryId: string; deploymentId: string })[] = [];
    const writes: LaneWrites = {
      save: (deployment) => void changes.push({ deployment }),
      recordDelivery: (deliveryId, deploymentId) => void changes.push({ deliveryId, deploymentId }),
    };
    // Applied once the decision is taken, in the order it wrote them, into one batch; the lock is
    // let go before that batch is written. What the decision read or wrote is written once
    // `written` resolves: the open batch, or the last one.
    const apply = (result: T): Decided<T> => {
      for (const change of changes) {
        const written = 'deployment' in change ? store.save(change.deployment) : store.recordDelivery(change.deliveryId, change.deploymentId);
        written.catch(() => undefined);
      }
      return { result, written: store.flush() };
    };
    try {
      const outcome = work(store.lane(key), facts, writes);
      return outcome instanceof Promise ? outcome.then(apply) : Promise.resolve(apply(outcome));
    } catch (error) {
      return Promise.reject(error);
    }
  }

  async orphans(runningHere: ReadonlySet<string>): Promise<Deployment[]> {
    return this.store.all().filter((d) => d.state === 'running' && !runningHere.has(d.id));
  }

  async lanesWaiting(): Promise<string[]> {
    return this.store.activeLanes().filter(([, lane]) => lane.waiting).map(([key]) => key);
  }

  async renew(): Promise<boolean> {
    return true;
  }

  activity(): { running: string[]; waiting: string[] } {
    const lanes = this.store.activeLanes().map(([, lane]) => lane);
    return {
      running: lanes.flatMap((l) => (l.running ? [l.running.id] : [])),
      waiting: lanes.flatMap((l) => (l.waiting ? [l.waiting.id] : [])),
    };
  }

  close(): Promise<void> {
    return this.store.close();
  }
}
