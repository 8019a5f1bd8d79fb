/**
 * The file journal: the persistent record of recent deployments and seen delivery ids of a webhook
 * running as one process (without WEBHOOK_DATABASE_URL), so a restart neither forgets what was
 * deployed nor redeploys a replayed delivery. file-journal.ts gives the Deployer its lanes; with a
 * database, postgres-journal.ts keeps the same record for every replica.
 *
 * Format: one JSON line per change in `<stateDir>/deployments.jsonl` (a deployment snapshot or a
 * delivery id). Lines are appended in batches with O_APPEND; a torn last line after a crash is
 * skipped on load. When the journal grows past twice what is kept, it is rewritten atomically
 * (temporary file, then rename) with only the current state, in place of the next batch.
 *
 * Group commit: a change is applied to memory when it is decided, so the next decision (of the same
 * target too) sees it at once, and the caller learns when its line is written (`save` and
 * `recordDelivery` resolve then; `flush` when everything decided so far is). Every change decided
 * meanwhile joins one batch, written by one append. A batch that cannot be written is not taken,
 * and neither is anything decided after it: its callers and those of every later batch not yet
 * written get the error, and memory is read again from the journal file, which holds exactly what
 * was written. If even that read fails, the store refuses every further change (the process must
 * restart: loading the journal at start is the recovery).
 *
 * `deployedCommit` and `release` come from a target's directory (through the launcher): only a
 * commit id and a release name are kept, whatever a journal written before that rule holds.
 */
import { readFileSync } from 'node:fs';
import { mkdir, open, readFile, rename, writeFile, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { LRUCache } from 'lru-cache';
import type { Logger } from 'pino';
import type { Lane } from './queue.js';
import { commitIdOrNull, FINAL_STATES, releaseNameOrNull, type Deployment } from './types.js';

type JournalLine =
  | { type: 'deployment'; deployment: Deployment }
  | { type: 'delivery'; id: string; deploymentId: string; at: string };

/** Changes decided while the batch before was being written: one append. */
interface Batch {
  lines: string[];
  /** The store's generation when the batch was opened. */
  generation: number;
  written: Promise<void>;
}

export interface DeploymentStoreOptions {
  /** Finished deployments kept (running and queued ones are always kept). */
  maxDeployments?: number;
  /** Delivery ids remembered; providers redeliver within days, so thousands is plenty. */
  maxDeliveries?: number;
}

export class DeploymentStore {
  private readonly deployments = new Map<string, Deployment>();
  /**
   * Delivery ids seen, the oldest forgotten first. Not a Map trimmed through `keys().next()`: V8
   * leaves a deleted entry as a hole until the table is rebuilt, and every trim walked past all the
   * holes before it (about 10 µs per push once 20 000 ids were kept, 5 % of an acknowledgement).
   * Only `peek` reads it, so the order is that of recording.
   */
  private readonly deliveries: LRUCache<string, { deploymentId: string; at: string }>;
  /** By target and commit: the newest successful deployment, and the last changed one; one lookup per push. */
  private readonly succeeded = new Map<string, Deployment>();
  private readonly latest = new Map<string, Deployment>();
  /** By target: the deployment running and the one waiting (state `running`, `queued`). */
  private readonly lanes = new Map<string, Lane>();
  private readonly file: string;
  private readonly maxDeployments: number;
  private readonly maxDeliveries: number;
  /** The batch that changes decided now join; null when none is open. */
  private open: Batch | null = null;
  /** The last batch handed to the writer: batches are written one after the other, in order. */
  private writeChain: Promise<void> = Promise.resolve();
  /** Bumped when a batch could not be written: batches decided before that are not written. */
  private generation = 0;
  /** Set when memory could not be read again after a failed write: every change is refused. */
  private broken: Error | null = null;
  /** The file does not end with a newline (a torn line): the next append starts with one. */
  private tornTail = false;
  private journalLines = 0;
  /** The journal, open for appending: one write per batch instead of open + write + close. */
  private journal: FileHandle | null = null;

  private constructor(
    private readonly dir: string,
    private readonly logger: Logger,
    options: DeploymentStoreOptions,
  ) {
    this.file = join(dir, 'deployments.jsonl');
    this.maxDeployments = options.maxDeployments ?? 500;
    this.maxDeliveries = options.maxDeliveries ?? 20_000;
    this.deliveries = new LRUCache({ max: this.maxDeliveries });
  }

  static async open(dir: string, logger: Logger, options: DeploymentStoreOptions = {}): Promise<DeploymentStore> {
    await mkdir(dir, { recursive: true, mode: 0o700 });
    const store = new DeploymentStore(dir, logger, options);
    await store.load();
    return store;
  }

  private async load(): Promise<void> {
    let text: string;
    try {
      text = await readFile(this.file, 'utf8');
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return;
      throw error;
    }
    this.replay(text);
    await this.compact();
  }

  /** Memory as the journal's text says: every line in order (unreadable ones skipped and counted). */
  private replay(text: string): void {
    let skipped = 0;
    for (const line of text.split('\n')) {
      if (line.trim() === '') continue;
      let entry: JournalLine;
      try {
        entry = JSON.parse(line) as JournalLine;
      } catch {
        skipped++;
        continue;
      }
      if (entry.type === 'deployment' && entry.deployment?.id) this.remember(checked(entry.deployment));
      else if (entry.type === 'delivery' && entry.id) this.rememberDelivery(entry.id, entry.deploymentId, entry.at);
    }
    if (skipped) this.logger.warn({ skipped, file: this.file }, 'skipped unreadable lines in the deployment journal');
    this.tornTail = text.length > 0 && !text.endsWith('\n');
  }

  get(id: string): Deployment | undefined {
    return this.deployments.get(id);
  }

  /** Newest first. */
  list(filter: { target?: string; limit?: number } = {}): Deployment[] {
    const all = [...this.deployments.values()].reverse();
    const matching = filter.target ? all.filter((d) => d.target === filter.target) : all;
    return matching.slice(0, filter.limit ?? 50);
  }

  all(): Deployment[] {
    return [...this.deployments.values()];
  }

  /** The newest successful deployment that put `commit` live on `target`, if one is kept. */
  succeededWith(target: string, commit: string): Deployment | undefined {
    return this.succeeded.get(`${target}\n${commit}`);
  }

  /** The most recently changed deployment of `commit` on `target` (any state), if one is kept. */
  latestWith(target: string, commit: string): Deployment | undefined {
    return this.latest.get(`${target}\n${commit}`);
  }

  deploymentOfDelivery(deliveryId: string): string | undefined {
    return this.deliveries.peek(deliveryId)?.deploymentId;
  }

  /** A target's lane: its deployment in state `running` and the one in state `queued`. */
  lane(target: string): Lane {
    const lane = this.lanes.get(target);
    return { running: lane?.running ?? null, waiting: lane?.waiting ?? null };
  }

  /** Every lane with a deployment running or waiting. */
  activeLanes(): [string, Lane][] {
    return [...this.lanes].filter(([, lane]) => lane.running || lane.waiting);
  }

  /** Store a deployment snapshot: visible at once; resolves once it is written to the journal. */
  save(deployment: Deployment): Promise<void> {
    const snapshot = checked(deployment);
    return this.append({ type: 'deployment', deployment: snapshot }, () => this.remember(snapshot));
  }

  recordDelivery(deliveryId: string, deploymentId: string): Promise<void> {
    const at = new Date().toISOString();
    return this.append({ type: 'delivery', id: deliveryId, deploymentId, at }, () => this.rememberDelivery(deliveryId, deploymentId, at));
  }

  /**
   * Resolves when everything decided so far is written; rejects when some of it could not be (and so
   * was not taken).
   */
  flush(): Promise<void> {
    if (this.broken) return Promise.reject(this.broken);
    return this.open?.written ?? this.writeChain;
  }

  private remember(deployment: Deployment): void {
    const previous = this.deployments.get(deployment.id);
    if (previous) this.forgetIndexed(previous);
    this.deployments.delete(deployment.id); // re-insert: the map stays in order of last change
    this.deployments.set(deployment.id, deployment);
    this.placeInLane(deployment);
    if (deployment.state === 'succeeded' && deployment.deployedCommit) this.succeeded.set(`${deployment.target}\n${deployment.deployedCommit}`, deployment);
    this.latest.set(`${deployment.target}\n${deployment.commit}`, deployment);
    if (this.deployments.size <= this.maxDeployments) return;
    for (const [id, d] of this.deployments) {
      if (this.deployments.size <= this.maxDeployments) break;
      if (FINAL_STATES.has(d.state)) {
        this.deployments.delete(id);
        this.forgetIndexed(d);
      }
    }
  }

  private placeInLane(deployment: Deployment): void {
    let lane = this.lanes.get(deployment.target);
    if (!lane) {
      lane = { running: null, waiting: null };
      this.lanes.set(deployment.target, lane);
    }
    if (lane.running?.id === deployment.id) lane.running = null;
    if (lane.waiting?.id === deployment.id) lane.waiting = null;
    if (deployment.state === 'running') lane.running = deployment;
    else if (deployment.state === 'queued') lane.waiting = deployment;
  }

  private forgetIndexed(deployment: Deployment): void {
    const key = `${deployment.target}\n${deployment.deployedCommit}`;
    if (this.succeeded.get(key) === deployment) this.succeeded.delete(key);
    const latestKey = `${deployment.target}\n${deployment.commit}`;
    if (this.latest.get(latestKey) === deployment) this.latest.delete(latestKey);
  }

  private rememberDelivery(id: string, deploymentId: string, at: string): void {
    this.deliveries.set(id, { deploymentId, at });
  }

  /**
   * Apply a change now and add its line to the open batch (opening one, written after the batches
   * before it): resolves once that batch is written.
   */
  private append(line: JournalLine, apply: () => void): Promise<void> {
    if (this.broken) return Promise.reject(this.broken);
    apply();
    let batch = this.open;
    if (!batch) {
      const opened: Batch = { lines: [], generation: this.generation, written: Promise.resolve() };
      opened.written = this.writeChain.catch(() => undefined).then(() => this.write(opened));
      this.writeChain = opened.written;
      this.open = batch = opened;
    }
    batch.lines.push(`${JSON.stringify(line)}\n`);
    return batch.written;
  }

  /**
   * Write a batch: closed here, so what it holds and what memory holds beyond the file are the same
   * changes; appended, or, when the journal has grown past its bound, the whole state rewritten in
   * its place (taken from memory before the first await, so exactly this batch on top of the file).
   */
  private async write(batch: Batch): Promise<void> {
    if (this.open === batch) this.open = null;
    if (batch.generation !== this.generation) {
      throw new Error('the deployment journal could not be written; this change was decided on one that was not taken');
    }
    try {
      if (this.journalLines + batch.lines.length > 2 * (this.maxDeployments + this.maxDeliveries)) {
        await this.compact();
        return;
      }
      this.journal ??= await open(this.file, 'a', 0o600);
      const text = batch.lines.join('');
      await this.journal.write(this.tornTail ? `\n${text}` : text);
      this.tornTail = false;
      this.journalLines += batch.lines.length;
    } catch (error) {
      this.rollBack(error);
      throw error;
    }
  }

  /**
   * A batch could not be written: nothing decided since the file's last line is taken. Batches not
   * yet written are refused (their generation is old), and memory is what the file holds again.
   */
  private rollBack(error: unknown): void {
    this.generation++;
    this.open = null;
    this.writeChain = Promise.resolve();
    void this.closeJournal();
    this.logger.error({ err: error, file: this.file }, 'could not write the deployment journal: the changes not written are not taken');
    try {
      let text = '';
      try {
        text = readFileSync(this.file, 'utf8');
      } catch (readError) {
        if ((readError as NodeJS.ErrnoException).code !== 'ENOENT') throw readError;
      }
      for (const map of [this.deployments, this.deliveries, this.succeeded, this.latest, this.lanes]) map.clear();
      this.replay(text);
    } catch (readError) {
      this.broken = new Error(`the deployment journal could not be read again after a failed write (${(readError as Error).message}); restart the server`);
      this.logger.error({ err: readError, file: this.file }, 'could not read the deployment journal again: every change is refused until a restart');
    }
  }

  private async closeJournal(): Promise<void> {
    const journal = this.journal;
    this.journal = null;
    await journal?.close().catch(() => undefined);
  }

  /** Resolves when everything saved so far is on disk; then closes the journal. */
  async close(): Promise<void> {
    await this.flush().catch(() => undefined);
    await this.closeJournal();
  }

  /** Rewrite the journal with only the current state, atomically. */
  private async compact(): Promise<void> {
    const lines: string[] = [];
    this.deliveries.rforEach(({ deploymentId, at }, id) => void lines.push(JSON.stringify({ type: 'delivery', id, deploymentId, at })));
    for (const deployment of this.deployments.values()) lines.push(JSON.stringify({ type: 'deployment', deployment }));
    const temporary = join(this.dir, `deployments.jsonl.tmp-${process.pid}`);
    await writeFile(temporary, lines.length ? `${lines.join('\n')}\n` : '', { mode: 0o600 });
    await rename(temporary, this.file);
    this.tornTail = false;
    await this.closeJournal(); // it still points at the replaced file
    this.journalLines = lines.length;
  }
}

/** A copy whose deployedCommit is a commit id and whose release is a release name, or null. */
function checked(deployment: Deployment): Deployment {
  return { ...deployment, deployedCommit: commitIdOrNull(deployment.deployedCommit), release: releaseNameOrNull(deployment.release) };
}
