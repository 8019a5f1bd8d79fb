/**
 * The journal in PostgreSQL (schema `webhook`, migrations/001_shared_state.sql), shared by every
 * webhook replica on one database: what the file journal (store.ts, file-journal.ts) is for one process.
 *
 * - lane lock: a transaction-scoped advisory lock per target (`pg_advisory_xact_lock(LANE_LOCKS,
 *   hashtext(target))`), taken before the lane is read; the decision's writes commit in the same
 *   transaction, which lets go of the lock. Two targets whose names hash alike only wait for each
 *   other. Transaction-scoped, so it works through a pooler in transaction mode as well.
 * - the lane and the facts about one commit and delivery id are read by one statement; the partial
 *   unique indexes keep at most one running and one waiting deployment per target whatever happens.
 * - replicas: each process registers with a lease (`lease_ends`, the database's clock) and renews it
 *   every third of WEBHOOK_REPLICA_LEASE_SECONDS; a replica whose lease ran out is deleted by the
 *   next replica that looks, and the deployments it was running are orphans. A replica that finds
 *   its own row gone was declared gone: renew() answers false (and registers it again).
 * - kept: the newest `maxDeployments` finished deployments (running and waiting ones always) and the
 *   delivery ids of the last `deliveryDays` days, pruned during renewals.
 */
import { hostname } from 'node:os';
import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import type { Logger } from 'pino';
import { withTransaction } from '../../../shared/db/transaction.js';
import type { DeploymentJournal, LaneFacts, LaneWrites } from './journal.js';
import type { Lane } from './queue.js';
import { commitIdOrNull, releaseNameOrNull, type Deployment } from './types.js';

/** The advisory lock class of the webhook's lanes (the first of pg_advisory_xact_lock's two int keys). */
const LANE_LOCKS = 0x77_68_6b_31; // 'whk1'
const PRUNE_EVERY_MS = 10 * 60_000;

/** A deployment row as the Deployment the API answers (types.ts), keys in its order; ISO times with milliseconds, as toISOString. */
const iso = (column: string) => `to_char(${column} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`;
const DEPLOYMENT = `json_build_object(
  'id', d.id, 'target', d.target, 'branch', d.branch, 'commit', d.commit_id, 'deployedCommit', d.deployed_commit,
  'release', d.release_name, 'provider', d.provider, 'deliveryId', d.delivery_id, 'state', d.state,
  'queuedAt', ${iso('d.queued_at')}, 'startedAt', ${iso('d.started_at')}, 'finishedAt', ${iso('d.finished_at')},
  'durationMs', d.duration_ms, 'exitCode', d.exit_code, 'logPath', d.log_path, 'supersededBy', d.superseded_by)`;

export interface PostgresJournalOptions {
  logger: Logger;
  /** How long a replica's lease lasts without renewal. */
  leaseMs: number;
  maxDeployments?: number;
  deliveryDays?: number;
}

export class PostgresJournal implements DeploymentJournal {
  readonly shared = true;
  /** This process, as the replicas table and a running deployment's `runner` know it. */
  readonly replicaId = randomUUID();
  private prunedAt = 0;

  private constructor(
    private readonly pool: pg.Pool,
    private readonly options: PostgresJournalOptions,
  ) {}

  /** Register this process as a replica (the schema must be migrated: migrate.ts). */
  static async open(pool: pg.Pool, options: PostgresJournalOptions): Promise<PostgresJournal> {
    const journal = new PostgresJournal(pool, options);
    await journal.register();
    return journal;
  }

  private async register(): Promise<void> {
    await this.pool.query(
      `INSERT INTO webhook.replicas (id, host, pid, lease_ends) VALUES ($1::uuid, $2::text, $3::int, now() + make_interval(secs => $4::float8 / 1000))
       ON CONFLICT (id) DO UPDATE SET lease_ends = excluded.lease_ends`,
      [this.replicaId, hostname().slice(0, 255), process.pid, this.options.leaseMs],
    );
  }

  async get(id: string): Promise<Deployment | undefined> {
    const { rows } = await this.pool.query<{ deployment: Deployment }>(`SELECT ${DEPLOYMENT} AS deployment FROM webhook.deployments d WHERE d.id = $1::text`, [id]);
    return rows[0]?.deployment;
  }

  async list(filter: { target?: string; limit?: number } = {}): Promise<Deployment[]> {
    const { rows } = await this.pool.query<{ deployment: Deployment }>(
      `SELECT ${DEPLOYMENT} AS deployment FROM webhook.deployments d
       WHERE $1::text IS NULL OR d.target = $1::text
       ORDER BY d.changed DESC LIMIT $2::int`,
      [filter.target ?? null, filter.limit ?? 50],
    );
    return rows.map((r) => r.deployment);
  }

  inLane<T>(
    key: string,
    about: { commit?: string; deliveryId?: string | null },
    work: (lane: Lane, facts: LaneFacts, writes: LaneWrites) => Promise<T> | T,
  ): Promise<T> {
    return withTransaction(this.pool, async (client) => {
      await client.query('SELECT pg_advisory_xact_lock($1::int, hashtext($2::text))', [LANE_LOCKS, key]);
      const { rows } = await client.query<{ running: Deployment | null; waiting: Deployment | null; seenDelivery: string | null; deployedBefore: Deployment | null; previous: Deployment | null }>(
        `SELECT
           (SELECT ${DEPLOYMENT} FROM webhook.deployments d WHERE d.target = $1::text AND d.state = 'running') AS running,
           (SELECT ${DEPLOYMENT} FROM webhook.deployments d WHERE d.target = $1::text AND d.state = 'queued') AS waiting,
           (SELECT x.deployment_id FROM webhook.deliveries x WHERE x.id = $3::text) AS "seenDelivery",
           (SELECT ${DEPLOYMENT} FROM webhook.deployments d WHERE d.target = $1::text AND d.state = 'succeeded' AND d.deployed_commit = $2::text
             ORDER BY d.changed DESC LIMIT 1) AS "deployedBefore",
           (SELECT ${DEPLOYMENT} FROM webhook.deployments d WHERE d.target = $1::text AND d.commit_id = $2::text
             ORDER BY d.changed DESC LIMIT 1) AS previous`,
        [key, about.commit ?? null, about.deliveryId ?? null],
      );
      const row = rows[0]!;
      const statements: { text: string; values: unknown[] }[] = [];
      const result = await work(
        { running: row.running, waiting: row.waiting },
        { seenDelivery: row.seenDelivery ?? undefined, deployedBefore: row.deployedBefore ?? undefined, previous: row.previous ?? undefined },
        {
          save: (deployment) => statements.push(this.saveStatement(deployment)),
          recordDelivery: (deliveryId, deploymentId) =>
            statements.push({
              text: 'INSERT INTO webhook.deliveries (id, deployment_id) VALUES ($1::text, $2::text) ON CONFLICT (id) DO NOTHING',
              values: [deliveryId, deploymentId],
            }),
        },
      );
      // In the order decided: a superseded waiting deployment leaves the lane before the new one enters.
      for (const statement of statements) await client.query(statement.text, statement.values);
      return result;
    });
  }

  /** One deployment, inserted or changed; a running one is recorded as this replica's. */
  private saveStatement(d: Deployment): { text: string; values: unknown[] } {
    return {
      text: `
        INSERT INTO webhook.deployments AS t (id, target, branch, commit_id, deployed_commit, release_name, provider, delivery_id, state,
          queued_at, started_at, finished_at, duration_ms, exit_code, log_path, superseded_by, runner)
        VALUES ($1::text, $2::text, $3::text, $4::text, $5::text, $6::text, $7::text, $8::text, $9::text,
          $10::timestamptz, $11::timestamptz, $12::timestamptz, $13::bigint, $14::int, $15::text, $16::text,
          CASE WHEN $9::text = 'running' THEN $17::uuid END)
        ON CONFLICT (id) DO UPDATE SET
          deployed_commit = excluded.deployed_commit, release_name = excluded.release_name, state = excluded.state,
          started_at = excluded.started_at, finished_at = excluded.finished_at, duration_ms = excluded.duration_ms,
          exit_code = excluded.exit_code, log_path = excluded.log_path, superseded_by = excluded.superseded_by,
          runner = excluded.runner, changed = nextval('webhook.deployment_changes')`,
      values: [
        d.id, d.target, d.branch, d.commit, commitIdOrNull(d.deployedCommit), releaseNameOrNull(d.release), d.provider, d.deliveryId, d.state,
        d.queuedAt, d.startedAt, d.finishedAt, d.durationMs, d.exitCode, d.logPath, d.supersededBy, this.replicaId,
      ],
    };
  }

  /**
   * Running deployments whose replica is gone: replicas whose lease ran out are deleted first (the
   * decision that they are gone: their next renewal fails), then every running deployment without
   * a registered runner is an orphan.
   */
  async orphans(): Promise<Deployment[]> {
    const { rows } = await this.pool.query<{ deployment: Deployment }>(
      `WITH gone AS (DELETE FROM webhook.replicas WHERE lease_ends < now() RETURNING id)
       SELECT ${DEPLOYMENT} AS deployment FROM webhook.deployments d
       WHERE d.state = 'running'
         AND (d.runner IN (SELECT id FROM gone) OR NOT EXISTS (SELECT 1 FROM webhook.replicas r WHERE r.id = d.runner))`,
    );
    return rows.map((r) => r.deployment);
  }

  async lanesWaiting(): Promise<string[]> {
    const { rows } = await this.pool.query<{ target: string }>(`SELECT d.target FROM webhook.deployments d WHERE d.state = 'queued' ORDER BY d.queued_at`);
    return rows.map((r) => r.target);
  }

  async renew(): Promise<boolean> {
    const { rowCount } = await this.pool.query('UPDATE webhook.replicas SET lease_ends = now() + make_interval(secs => $2::float8 / 1000) WHERE id = $1::uuid', [
      this.replicaId,
      this.options.leaseMs,
    ]);
    if (rowCount === 0) {
      await this.register();
      return false;
    }
    if (Date.now() - this.prunedAt > PRUNE_EVERY_MS) {
      this.prunedAt = Date.now();
      await this.prune().catch((error: unknown) => this.options.logger.warn({ err: error }, 'could not prune the deployment journal'));
    }
    return true;
  }

  private async prune(): Promise<void> {
    await this.pool.query(
      `DELETE FROM webhook.deployments WHERE state NOT IN ('running', 'queued') AND changed < (
         SELECT changed FROM webhook.deployments WHERE state NOT IN ('running', 'queued') ORDER BY changed DESC OFFSET $1::int LIMIT 1)`,
      [this.options.maxDeployments ?? 500],
    );
    await this.pool.query(`DELETE FROM webhook.deliveries WHERE at < now() - make_interval(days => $1::int)`, [this.options.deliveryDays ?? 30]);
  }

  activity(): null {
    return null;
  }

  /** Deregister: what this replica still records as running is an orphan for the others at once. */
  async close(): Promise<void> {
    await this.pool.query('DELETE FROM webhook.replicas WHERE id = $1::uuid', [this.replicaId]).catch(() => undefined);
  }
}
