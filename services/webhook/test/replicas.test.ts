/**
 * Two webhook processes (services/webhook/src/server.ts, as deployed) on one PostgreSQL
 * (WEBHOOK_DATABASE_URL) behave as one: the journal is shared, a target deploys one push at a time
 * whichever replica took it, a push acknowledged by one and replayed to the other deploys once,
 * failed authentications count against one budget, and a replica killed mid-deploy is found out by
 * the other, which records the deploy as interrupted, stops its orphaned script and runs what waits.
 *
 * One database and one least-privileged role for the file (it owns the schema `webhook` and nothing
 * else, as docs/webhook.md tells an operator to set up); both replicas start at once, so they also
 * migrate at once. They share DEPLOY_ROOT, as two replicas on one host do. The deploy script is
 * support/replica-deploy.sh, which records when each deploy starts and ends.
 */
import { randomBytes } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrateSet } from '../../shared/db/migrate.js';
import { WEBHOOK_MIGRATIONS } from '../src/database.js';
import { lacks, requirements } from '../../../test/helpers/requirements.js';
import { makeTempDir, repoRoot, waitFor } from './support/helpers.js';
import { startWebhookProcess, type ServerProcess } from './support/server-process.js';
import { commitId, pushPayload, seedTargets, send, sendGithub, sendGitlab } from './support/webhook-harness.js';

const adminUrl = process.env.TEST_DATABASE_URL;
const noDatabase = lacks(
  'the webhook replica tests',
  requirements.postgres('a PostgreSQL server the tests may create a database and a role in'),
);

const ADMIN = 'admin-token-for-tests-0123456789';
const AUTH_FAILURES_PER_MINUTE = 3;
const LEASE_SECONDS = 2;
const FINAL = ['succeeded', 'failed', 'refused', 'timed-out', 'interrupted', 'superseded'];

type Deployment = Record<string, unknown> & { id: string; state: string; commit: string };
interface Record_ {
  event: 'start' | 'end';
  commit: string;
  pid: number;
  at: number;
}

const withDatabase = (url: string, database: string, user?: { name: string; password: string }): string => {
  const parsed = new URL(url);
  parsed.pathname = `/${database}`;
  if (user) {
    parsed.username = user.name;
    parsed.password = user.password;
  }
  return parsed.toString();
};

describe.skipIf(noDatabase)('two webhook replicas on one PostgreSQL', () => {
  const suffix = `${process.pid}_${randomBytes(3).toString('hex')}`;
  const database = `fp_webhook_${suffix}`;
  const role = { name: `fp_webhook_${suffix}`, password: randomBytes(16).toString('hex') };
  const secrets = Object.fromEntries(seedTargets().map((t) => [t.secret, randomBytes(32).toString('hex')]));
  const shared = makeTempDir('webhook-replicas');
  const recordFile = join(shared, 'deploys.jsonl');
  let a: ServerProcess;
  let b: ServerProcess;

  beforeAll(async () => {
    const admin = new pg.Client({ connectionString: adminUrl });
    await admin.connect();
    try {
      await admin.query(`CREATE ROLE ${pg.escapeIdentifier(role.name)} LOGIN PASSWORD ${pg.escapeLiteral(role.password)}`);
      await admin.query(`CREATE DATABASE ${pg.escapeIdentifier(database)}`);
      await admin.query(`REVOKE ALL ON DATABASE ${pg.escapeIdentifier(database)} FROM PUBLIC`);
      await admin.query(`GRANT CONNECT ON DATABASE ${pg.escapeIdentifier(database)} TO ${pg.escapeIdentifier(role.name)}`);
    } finally {
      await admin.end();
    }
    // What the operator does once (docs/webhook.md): the webhook's schema, owned by its role.
    const owner = new pg.Client({ connectionString: withDatabase(adminUrl!, database) });
    await owner.connect();
    try {
      await owner.query('REVOKE CREATE ON SCHEMA public FROM PUBLIC');
      await owner.query(`CREATE SCHEMA webhook AUTHORIZATION ${pg.escapeIdentifier(role.name)}`);
    } finally {
      await owner.end();
    }
    const env = {
      ...secrets,
      WEBHOOK_DATABASE_URL: withDatabase(adminUrl!, database, role),
      WEBHOOK_REPLICA_LEASE_SECONDS: String(LEASE_SECONDS),
      WEBHOOK_ADMIN_TOKEN: ADMIN,
      WEBHOOK_AUTH_FAILURES_PER_MINUTE: String(AUTH_FAILURES_PER_MINUTE),
      DEPLOY_ROOT: join(shared, 'sites'),
      DEPLOY_SCRIPT: join(repoRoot, 'services/webhook/test/support/replica-deploy.sh'),
      RECORD_DEPLOY_FILE: recordFile,
      RECORD_DEPLOY_SLEEP: '0.4',
      DEPLOY_ENV_PASS: 'RECORD_DEPLOY_FILE RECORD_DEPLOY_SLEEP',
    };
    [a, b] = await Promise.all([startWebhookProcess('webhook-replica-a', env), startWebhookProcess('webhook-replica-b', env)]);
  }, 60_000);

  afterAll(async () => {
    for (const server of [a, b]) {
      if (!server || server.child.exitCode !== null || server.child.signalCode !== null) continue;
      server.child.kill('SIGTERM');
      await new Promise((resolve) => server.child.once('exit', resolve));
    }
    const admin = new pg.Client({ connectionString: adminUrl });
    await admin.connect();
    try {
      await admin.query(`DROP DATABASE IF EXISTS ${pg.escapeIdentifier(database)} WITH (FORCE)`);
      await admin.query(`DROP ROLE IF EXISTS ${pg.escapeIdentifier(role.name)}`);
    } finally {
      await admin.end();
    }
  }, 60_000);

  const adminGet = async (url: string, path: string): Promise<{ status: number; json: Record<string, unknown> }> => {
    const res = await send(url, '', { method: 'GET', path, headers: { authorization: `Bearer ${ADMIN}` } });
    return { status: res.status, json: res.json };
  };
  const deploymentOn = async (url: string, id: string): Promise<Deployment> => (await adminGet(url, `/deployments/${id}`)).json as Deployment;
  const settled = (url: string, id: string, timeoutMs = 20_000): Promise<Deployment> =>
    waitFor(async () => {
      const d = await deploymentOn(url, id);
      return FINAL.includes(d.state) ? d : null;
    }, timeoutMs, `deployment ${id} to finish`);
  const records = (): Record_[] =>
    existsSync(recordFile)
      ? readFileSync(recordFile, 'utf8')
          .trim()
          .split('\n')
          .filter(Boolean)
          .map((line) => JSON.parse(line) as Record_)
      : [];
  const startsOf = (commit: string) => records().filter((r) => r.event === 'start' && r.commit === commit);
  const gitlab = (url: string, branch: string, commit: string, headers: Record<string, string> = {}) =>
    sendGitlab(url, pushPayload(branch, commit), secrets[branch === 'main' ? 'SECRET_MAIN' : 'SECRET_DEVELOP']!, headers);

  it('both replicas migrated the schema at once, each file applied once; migrating again is a no-op', async () => {
    const pool = new pg.Pool({ connectionString: withDatabase(adminUrl!, database, role), max: 1 });
    try {
      const { rows } = await pool.query<{ name: string }>('SELECT name FROM webhook.schema_migrations ORDER BY name');
      expect(rows.map((r) => r.name)).toEqual(readdirSync(WEBHOOK_MIGRATIONS.dir).filter((f) => f.endsWith('.sql')).sort());
      expect(await migrateSet(pool, WEBHOOK_MIGRATIONS)).toEqual([]);
    } finally {
      await pool.end();
    }
  });

  it('the journal is shared: a push acknowledged by A is in B\'s GET /deployments, and both answer the same', async () => {
    const commit = commitId();
    const res = await gitlab(a.url, 'main', commit);
    expect(res.status).toBe(202);
    const id = String(res.json.deploymentId);
    const done = await settled(b.url, id);
    expect(done).toMatchObject({ id, target: 'main', commit, state: 'succeeded', deployedCommit: commit });
    expect(await deploymentOn(a.url, id)).toEqual(done);
    const [listA, listB] = await Promise.all([adminGet(a.url, '/deployments?target=main'), adminGet(b.url, '/deployments?target=main')]);
    expect(listA.json).toEqual(listB.json);
    expect((listA.json.deployments as Deployment[]).map((d) => d.id)).toEqual([id]);
  });

  it('pushes for one target sent to A and to B at once deploy one after the other, never two at once', async () => {
    const secret = secrets.SECRET_TEAM_DE2!;
    const first = await sendGithub(a.url, pushPayload('feature/team-de2/first', commitId()), secret);
    await waitFor(async () => (await deploymentOn(b.url, String(first.json.deploymentId))).state === 'running', 10_000, 'the first deploy to run');
    // Six more at once, alternating between the replicas: each is admitted under the target's lock.
    const commits = Array.from({ length: 6 }, () => commitId());
    const answers = await Promise.all(commits.map((commit, i) => sendGithub(i % 2 ? b.url : a.url, pushPayload(`feature/team-de2/p${i}`, commit), secret)));
    expect(answers.map((r) => r.status)).toEqual(commits.map(() => 202));
    const ids = [first, ...answers].map((r) => String(r.json.deploymentId));
    const final = await Promise.all(ids.map((id, i) => settled(i % 2 ? a.url : b.url, id, 30_000)));
    expect(final.every((d) => d.state === 'succeeded' || d.state === 'superseded')).toBe(true);
    const ran = final.filter((d) => d.state === 'succeeded');
    expect(ran.length).toBeGreaterThanOrEqual(2); // the first, and the one that waited last
    // Never at once: each deploy script started after the previous one of the target ended.
    const runs = records().filter((r) => ran.some((d) => d.commit === r.commit));
    expect(runs).toHaveLength(2 * ran.length);
    const ordered = [...runs].sort((x, y) => x.at - y.at || (x.event === 'end' ? -1 : 1));
    ordered.forEach((r, i) => expect(r.event, `record ${i}`).toBe(i % 2 ? 'end' : 'start'));
    for (let i = 1; i < ordered.length; i += 2) expect(ordered[i]!.commit).toBe(ordered[i - 1]!.commit);
    // The journal says the same.
    const byStart = [...ran].sort((x, y) => Date.parse(String(x.startedAt)) - Date.parse(String(y.startedAt)));
    for (let i = 1; i < byStart.length; i++) expect(Date.parse(String(byStart[i]!.startedAt))).toBeGreaterThanOrEqual(Date.parse(String(byStart[i - 1]!.finishedAt)));
    for (const d of final.filter((x) => x.state === 'superseded')) expect(ids).toContain(d.supersededBy);
  }, 60_000);

  it('a push acknowledged by A and replayed to B deploys once: the same delivery id at once or later, and the same body under a new id', async () => {
    const commit = commitId();
    const delivery = randomBytes(16).toString('hex');
    const [one, other] = await Promise.all([
      gitlab(a.url, 'develop', commit, { 'idempotency-key': delivery }),
      gitlab(b.url, 'develop', commit, { 'idempotency-key': delivery }),
    ]);
    expect([one.status, other.status].sort()).toEqual([200, 202]);
    const accepted = one.status === 202 ? one : other;
    const id = String(accepted.json.deploymentId);
    expect((one.status === 200 ? one : other).json).toMatchObject({ status: 'duplicate', deploymentId: id });

    const replay = await gitlab(b.url, 'develop', commit, { 'idempotency-key': delivery });
    expect(replay.json).toMatchObject({ status: 'duplicate', reason: 'delivery', deploymentId: id });
    expect(await settled(a.url, id)).toMatchObject({ state: 'succeeded', deployedCommit: commit });
    const fresh = await gitlab(a.url, 'develop', commit);
    expect(fresh.json).toMatchObject({ status: 'duplicate', reason: 'live', deploymentId: id });
    expect(startsOf(commit)).toHaveLength(1);
  });

  it('failed authentications to A and to B count against one budget per address; a correctly signed push still passes', async () => {
    const address = '203.0.113.50';
    const forged = (url: string) =>
      sendGithub(url, pushPayload('feature/team-de1/forged', commitId()), secrets.SECRET_TEAM_DE2!, { 'x-forwarded-for': address });
    const statuses: number[] = [];
    for (const url of [a.url, b.url, a.url, b.url, a.url]) statuses.push((await forged(url)).status);
    expect(statuses).toEqual([401, 401, 401, 429, 429]);
    const limited = await forged(b.url);
    expect(Number(limited.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(Number(limited.headers.get('retry-after'))).toBeLessThanOrEqual(60);
    const genuine = await sendGithub(b.url, pushPayload('feature/team-fv/genuine', commitId()), secrets.SECRET_TEAM_FV!, { 'x-forwarded-for': address });
    expect(genuine.status).toBe(202);
    // Another address has its own budget.
    expect((await sendGithub(a.url, pushPayload('feature/team-de1/x', commitId()), 'wrong', { 'x-forwarded-for': '203.0.113.51' })).status).toBe(401);
  });

  // Last: replica A does not come back.
  it('a replica killed mid-deploy is found out by the other: the deploy is recorded as interrupted, its orphaned script stopped, and the push waiting behind it deploys', async () => {
    const secret = secrets.SECRET_TEAM_DE1!;
    const slowCommit = commitId();
    const slow = await sendGithub(a.url, pushPayload('feature/team-de1/slow', slowCommit), secret);
    const slowId = String(slow.json.deploymentId);
    await waitFor(async () => (await deploymentOn(b.url, slowId)).state === 'running' && startsOf(slowCommit).length === 1, 10_000, 'the slow deploy to run');
    const script = startsOf(slowCommit)[0]!.pid;
    const nextCommit = commitId();
    const next = await sendGithub(b.url, pushPayload('feature/team-de1/next', nextCommit), secret);
    expect(next.status).toBe(202);
    expect(await deploymentOn(a.url, String(next.json.deploymentId))).toMatchObject({ state: 'queued' });

    // Replica A and its launcher die outright (stopped first, so neither reacts to the other's
    // death): nothing of A is left to end the deploy or renew A's lease.
    const launcher = launcherOf(a.child.pid!);
    expect(launcher).toBeDefined();
    process.kill(launcher!, 'SIGSTOP');
    a.child.kill('SIGSTOP');
    process.kill(launcher!, 'SIGKILL');
    a.child.kill('SIGKILL');
    await new Promise((resolve) => a.child.once('exit', resolve));
    const killed = Date.now();
    expect(alive(script)).toBe(true);

    const interrupted = await settled(b.url, slowId, 30_000);
    expect(interrupted).toMatchObject({ state: 'interrupted', commit: slowCommit });
    // Found out once the lease has run out, not long after.
    expect(Date.now() - killed).toBeLessThan(LEASE_SECONDS * 1000 * 10);
    await waitFor(() => !alive(script), 30_000, 'the orphaned deploy script to be stopped');
    expect(await settled(b.url, String(next.json.deploymentId))).toMatchObject({ state: 'succeeded', deployedCommit: nextCommit });
    expect(records().filter((r) => r.commit === slowCommit).map((r) => r.event)).toEqual(['start']);
  }, 60_000);
});

const pids = (): number[] => readdirSync('/proc').filter((e) => /^\d+$/.test(e)).map(Number);
const statOf = (pid: number): string[] | null => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  } catch {
    return null;
  }
};
const alive = (pid: number): boolean => {
  const stat = statOf(pid);
  return stat !== null && stat[0] !== 'Z';
};
/** The deploy launcher forked by a webhook server process. */
function launcherOf(serverPid: number): number | undefined {
  return pids().find((pid) => {
    if (statOf(pid)?.[1] !== String(serverPid)) return false;
    try {
      return readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('launcher-process.mjs');
    } catch {
      return false;
    }
  });
}
