/**
 * The replica rehearsal (issue 30, docs/infra.md "The replica rehearsal"): three API processes, two
 * QC workers and two webhook processes on one fresh PostgreSQL database behind one real Caddy with the stack's rendered
 * Caddyfile (test/journeys/replicas/stack.ts), driven through the proxy. Each step prints one PASS or
 * FAIL line as `npm run stack:rehearse` does. Standalone: `npm run stack:rehearse-replicas`.
 *
 * 1. One user's writes spread over the replicas: exactly the change limit is accepted.
 * 2. An edit through replica A is in the tile replica B serves next, although B had the tile cached.
 * 3. Every QC job runs once with two workers: each mail and each agency notice arrives once.
 * 4. A push acknowledged by webhook A and replayed to webhook B deploys once (the webhook's queue
 *    and journal in PostgreSQL, WEBHOOK_DATABASE_URL).
 */
import { randomBytes } from 'node:crypto';
import { VectorTile } from '@mapbox/vector-tile';
import { PbfReader } from 'pbf';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { StepResult } from '../../infra/rehearsal/steps.js';
import { lacks, requirements } from '../helpers/requirements.js';
import { eventually } from '../helpers/wait.js';
import { pushPayload } from '../../services/webhook/test/support/webhook-harness.js';
import { DOMAINS, REVIEWERS, UPSTREAM_HEADER, startReplicaStack, type Answer, type ReplicaStack } from './replicas/stack.js';
import { tileOf } from '../helpers/tiles.js';

const APIS = 3;
const WORKERS = 2;
const WEBHOOKS = 2;
/** The change limit per user and minute, and how many writes one user sends at once. */
const LIMIT = 8;
const WRITES = 20;
/** Features submitted and approved in step 3, each by a contributor of its own. */
const FEATURES = 6;

const MISSING = lacks(
  'the replica rehearsal',
  requirements.postgres('replicas share one PostgreSQL; the embedded PGlite serves one process'),
  requirements.caddy(),
);

let stack: ReplicaStack;
const results: StepResult[] = [];

beforeAll(async () => {
  if (MISSING) return;
  const began = Date.now();
  stack = await startReplicaStack({ apis: APIS, workers: WORKERS, webhooks: WEBHOOKS, writesPerMinute: LIMIT, agencyDelayMs: 300 });
  console.log(`replica stack up after ${((Date.now() - began) / 1000).toFixed(1)} s: ${[...stack.apis, ...stack.workers, ...stack.webhooks].map((p) => p.name).join(', ')} behind Caddy on :${stack.proxy.port}`);
}, 180_000);

afterAll(async () => {
  await stack?.stop();
});

/** Runs a step and prints its line as the stack rehearsal does (infra/rehearsal/rehearse.ts). */
async function step(name: string, run: () => Promise<string | undefined>): Promise<void> {
  const began = Date.now();
  const report = (result: StepResult) => {
    results.push(result);
    console.log(`${result.ok ? 'PASS' : 'FAIL'} ${name}${result.detail ? ` — ${result.detail}` : ''} (${(result.ms / 1000).toFixed(1)} s)`);
  };
  try {
    const detail = await run();
    report({ step: name, ok: true, ...(detail ? { detail } : {}), ms: Date.now() - began });
  } catch (error) {
    report({ step: name, ok: false, detail: (error as Error).message.split('\n').slice(0, 4).join(' '), ms: Date.now() - began });
    throw error;
  }
}

/** A token of the stand-in issuer; approvals need the second factor (acr aal2). */
const tokenFor = (sub: string, role: string, email?: string) => stack.issuer.sign({ sub, role, acr: 'aal2', ...(email ? { email, name: sub } : {}) });

const pointFeature = (name: string, lon = 13.4, lat = 52.5) => ({ type: 'Feature', geometry: { type: 'Point', coordinates: [lon, lat] }, properties: { name, kategorie: 'friedhof' } });

/** The replica (api-1, webhook-2, …) that gave an answer, from the upstream address Caddy names. */
function replicaOf(answer: Answer): string {
  const address = String(answer.headers[UPSTREAM_HEADER.toLowerCase()] ?? '');
  return [...stack.apis, ...stack.webhooks].find((p) => address === `127.0.0.1:${p.port}`)?.name ?? `unknown (${address || 'no upstream header'})`;
}

const tally = (names: string[]) => Object.entries(names.reduce<Record<string, number>>((acc, n) => ({ ...acc, [n]: (acc[n] ?? 0) + 1 }), {})).sort(([a], [b]) => a.localeCompare(b));
const describeTally = (names: string[]) => tally(names).map(([n, c]) => `${n} ${c}`).join(', ');

/** The path of the tile holding a lon/lat. */
function tilePath(lon: number, lat: number, z: number): string {
  const { x, y } = tileOf(lon, lat, z);
  return `/api/tiles/${z}/${x}/${y}.mvt`;
}

/** The feature names in a tile answer. */
function namesIn(answer: Answer): string[] {
  const layer = new VectorTile(new PbfReader(answer.bytes)).layers.features;
  return layer ? Array.from({ length: layer.length }, (_, i) => String(layer.feature(i).properties.name)) : [];
}
/**
 * Job id → the workers that logged finishing it: services/api/src/qc/jobs/tasks.ts logs "QC job
 * finished" with the job's id, qc/jobs/osm-batch.ts "OSM export batch finished" with the ids of the
 * batch's jobs.
 */
function finishedRuns(): Map<string, string[]> {
  const runs = new Map<string, string[]>();
  for (const worker of stack.workers) {
    for (const line of worker.log) {
      if (!line.startsWith('{')) continue;
      let entry: { msg?: string; jobId?: number; jobs?: number[] };
      try {
        entry = JSON.parse(line) as typeof entry;
      } catch {
        continue;
      }
      const ids = entry.msg === 'QC job finished' ? [entry.jobId] : entry.msg === 'OSM export batch finished' ? (entry.jobs ?? []) : [];
      for (const id of ids) runs.set(String(id), [...(runs.get(String(id)) ?? []), worker.name]);
    }
  }
  return runs;
}

const cacheOf = (answer: Answer) => /cache;desc=(\w+)/.exec(String(answer.headers['server-timing'] ?? ''))?.[1] ?? 'none';

describe.skipIf(MISSING)(`the replica rehearsal: ${APIS} API processes, ${WORKERS} QC workers and ${WEBHOOKS} webhooks on one PostgreSQL behind Caddy`, () => {
  it(`1 the write limit holds across replicas: ${WRITES} writes of one user at once, round robin over the replicas, exactly ${LIMIT} accepted`, async () => {
    await step(`1 the write limit holds across replicas (${WRITES} writes of one user, limit ${LIMIT})`, async () => {
      const token = await tokenFor('replica-writer', 'contributor');
      const answers = await Promise.all(Array.from({ length: WRITES }, (_, i) => stack.request(DOMAINS.api, 'POST', '/api/features', { token, body: pointFeature(`Limit ${i}`) })));
      const accepted = answers.filter((a) => a.status === 201);
      const refused = answers.filter((a) => a.status === 429);
      // Every replica answered some of them: the budget is not one process's.
      expect(new Set(answers.map(replicaOf)).size, describeTally(answers.map(replicaOf))).toBe(APIS);
      expect(accepted.length + refused.length, `other answers: ${answers.filter((a) => a.status !== 201 && a.status !== 429).map((a) => `${a.status} ${a.text.slice(0, 120)}`).join(' | ')}`).toBe(WRITES);
      expect(accepted).toHaveLength(LIMIT);
      const { rows } = await stack.db.pool.query<{ hits: number }>(`SELECT hits FROM http.rate_limits WHERE key = 'user:replica-writer'`);
      expect(rows).toEqual([{ hits: WRITES }]);
      return `${accepted.length} × 201, ${refused.length} × 429; answered by ${describeTally(answers.map(replicaOf))}; accepted by ${describeTally(accepted.map(replicaOf))}; one counter row (${WRITES} hits)`;
    });
  }, 60_000);

  it('2 an edit through replica A is in the tile replica B serves next, although B had that tile cached', async () => {
    await step('2 an edit through replica A is in the tile replica B serves next', async () => {
      const [a, b] = [stack.apis[0]!.name, stack.apis[1]!.name];
      const editor = await tokenFor('tile-editor', 'contributor');
      const reader = await tokenFor('tile-reader', 'contributor');
      const suffix = Math.random().toString(36).slice(2, 8);
      const [lon, lat] = [13.3777, 52.5163];
      const tile = tilePath(lon, lat, 15);
      const created = await stack.request(DOMAINS.api, 'POST', '/api/features', { token: editor, replica: a, body: pointFeature(`Tor ${suffix}`, lon, lat) });
      expect(created.status, created.text).toBe(201);
      expect(replicaOf(created)).toBe(a);
      const id = (JSON.parse(created.text) as { id: string }).id;
      // B holds the tile in its cache with the feature as created: a hit, answered without the database.
      const fromB = () => stack.request(DOMAINS.api, 'GET', tile, { token: reader, replica: b });
      await eventually(`${b} serving ${tile} from its cache with "Tor ${suffix}"`, async () => {
        const answer = await fromB();
        return answer.status === 200 && replicaOf(answer) === b && cacheOf(answer) === 'hit' && namesIn(answer).includes(`Tor ${suffix}`);
      }, 20_000);
      const edited = await stack.request(DOMAINS.api, 'PUT', `/api/features/${encodeURIComponent(id)}`, {
        token: editor,
        replica: a,
        headers: { 'if-match': String(created.headers.etag) },
        body: pointFeature(`Tor ${suffix} renamed`, lon, lat),
      });
      expect(edited.status, edited.text).toBe(200);
      expect(replicaOf(edited)).toBe(a);
      const committed = Date.now();
      // From the moment A's answer arrives: B's answers until one has the edit. B drops the tile when
      // the change notification reaches it (tiles/changes.ts); a notification can arrive a moment
      // after the writer's commit returns (docs/api.md "Vector tiles"), so B may still answer from its
      // cache in that moment, never after it.
      const stale: number[] = [];
      const fresh = await eventually(`${b} serving the renamed feature`, async () => {
        const answer = await fromB();
        if (answer.status !== 200 || replicaOf(answer) !== b) throw new Error(`${replicaOf(answer)} answered ${answer.status}`);
        const names = namesIn(answer);
        if (names.includes(`Tor ${suffix} renamed`)) return { answer, names, after: Date.now() - committed };
        stale.push(Date.now() - committed);
        return undefined;
      }, 10_000, 5);
      expect(fresh.names).not.toContain(`Tor ${suffix}`);
      // Rebuilt by B after it dropped its copy, then cached again.
      expect(cacheOf(fresh.answer)).toBe('miss');
      const again = await fromB();
      expect([cacheOf(again), namesIn(again).includes(`Tor ${suffix} renamed`)]).toEqual(['hit', true]);
      return `${a} renamed ${id}; ${b}, which had the tile cached (hit), ${stale.length ? `answered from its cache ${stale.length}× for ${stale.at(-1)} ms after A's answer, then` : 'at once'} rebuilt it with the new name (${fresh.after} ms after A's answer) and caches it again`;
    });
  }, 60_000);

  it(`3 every QC job runs once with ${WORKERS} workers: ${FEATURES} approvals, each mail and agency notice arrives once`, async () => {
    await step(`3 every QC job runs once with ${WORKERS} workers (${FEATURES} features submitted and approved through the proxy)`, async () => {
      // Without an e-mail claim: the reviewers' notices go to REVIEWER_EMAILS alone.
      const reviewer = await tokenFor('rita-reviewer', 'reviewer');
      const contributors = await Promise.all(Array.from({ length: FEATURES }, (_, k) => tokenFor(`contributor-${k + 1}`, 'contributor', `c${k + 1}@example.org`)));
      const names = contributors.map((_, k) => `QC ${k + 1} ${Math.random().toString(36).slice(2, 8)}`);
      const created = await Promise.all(contributors.map((token, k) => stack.request(DOMAINS.api, 'POST', '/api/features', { token, body: pointFeature(names[k]!, 13.41 + k / 1000, 52.51) })));
      for (const answer of created) expect(answer.status, answer.text).toBe(201);
      const ids = created.map((a) => (JSON.parse(a.text) as { id: string }).id);
      const submitted = await Promise.all(contributors.map((token, k) => stack.request(DOMAINS.api, 'POST', '/api/qc/submit', { token, body: { featureId: ids[k] } })));
      for (const answer of submitted) expect(answer.status, answer.text).toBe(200);
      const approved = await Promise.all(ids.map((id) => stack.request(DOMAINS.api, 'POST', `/api/qc/approve/${encodeURIComponent(id)}`, { token: reviewer })));
      for (const answer of approved) expect(answer.status, answer.text).toBe(200);

      // Settled: every job finished, graphile's queue empty, every contributor notice mailed. Nothing
      // can run a second time after that, so the counts below are final.
      const jobs = await eventually(
        'every QC job finished and the queue empty',
        async () => {
          const { rows } = await stack.db.pool.query<{ id: string; task: string; status: string; attempts: number; featureId: string; batchId: string | null }>(
            `SELECT id::text, task, status, attempts, feature_id AS "featureId", batch_id::text AS "batchId" FROM qc.jobs WHERE feature_id = ANY($1::text[]) ORDER BY id`,
            [ids],
          );
          const queued = (await stack.db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM graphile_worker.jobs')).rows[0]!.n;
          const pendingMail = (await stack.db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM qc.notices WHERE mail_status = 'pending'`)).rows[0]!.n;
          const open = rows.filter((r) => ['queued', 'running', 'retrying'].includes(r.status));
          // The jobs of a transition are written with it: all of them exist once the approvals answered.
          return open.length === 0 && queued === 0 && pendingMail === 0 ? rows : undefined;
        },
        45_000,
        100,
      );
      // One job per feature and task (reviewer notice, the exports, the agency notice), each run once.
      for (const id of ids) {
        const tasks = jobs.filter((j) => j.featureId === id).map((j) => j.task);
        expect(tasks.length, `${id}: ${tasks.join(', ')}`).toBe(new Set(tasks).size);
        expect(tasks).toEqual(expect.arrayContaining(['reviewer_notice', 'agency_notice']));
      }
      // Each job ran with one attempt; nearby OSM exports go up as one batch (one changeset, qc/jobs/osm-batch.ts):
      // the batch's leader counts the attempt, the others of its batch none.
      const leaders = new Set(jobs.filter((j) => j.task === 'osm_export' && j.attempts === 1).map((j) => j.batchId));
      const batched = (j: (typeof jobs)[number]) => j.task === 'osm_export' && j.attempts === 0 && j.batchId !== null && leaders.has(j.batchId);
      expect(jobs.filter((j) => j.attempts !== 1 && !batched(j)).map((j) => `${j.task} ${j.featureId}: ${j.attempts} attempts (${j.status}, batch ${j.batchId})`)).toEqual([]);
      const byTask = (task: string) => jobs.filter((j) => j.task === task);
      expect(byTask('reviewer_notice').map((j) => j.status)).toEqual(Array(FEATURES).fill('sent'));
      expect(byTask('agency_notice').map((j) => j.status)).toEqual(Array(FEATURES).fill('sent'));
      // The runs as the workers log them: each job finished once, by one worker. Both workers ran
      // jobs: a worker busy with a slow agency notice leaves the next job to the other.
      const runs = await eventually('every job finished in a worker\'s log', () => {
        const seen = finishedRuns();
        return jobs.every((j) => seen.has(j.id)) ? seen : undefined;
      }, 10_000);
      expect(jobs.filter((j) => runs.get(j.id)!.length !== 1).map((j) => `${j.task} ${j.id} finished by ${runs.get(j.id)!.join(', ')}`)).toEqual([]);
      const ranBy = jobs.map((j) => runs.get(j.id)![0]!);
      expect(new Set(ranBy).size, describeTally(ranBy)).toBe(WORKERS);

      for (const [k, id] of ids.entries()) {
        const about = stack.mail.messages.filter((m) => m.raw.includes(id));
        const review = about.filter((m) => m.subject.startsWith('QC review requested'));
        const decided = about.filter((m) => m.subject === `"${names[k]}" was approved`);
        expect(review.map((m) => m.envelope.to), `reviewer notices for ${id}`).toEqual([[REVIEWERS]]);
        expect(decided.map((m) => m.envelope.to), `contributor notices for ${id}`).toEqual([[`c${k + 1}@example.org`]]);
        expect(about, `mail about ${id}: ${about.map((m) => m.subject).join(' | ')}`).toHaveLength(2);
        const notices = stack.agency.filter((n) => n.body.includes(id));
        expect(notices, `agency notices for ${id}`).toHaveLength(1);
      }
      expect(new Set(stack.agency.map((n) => n.deliveryId)).size).toBe(stack.agency.length);
      return `${jobs.length} jobs, each run once (${describeTally(ranBy)}; the ${FEATURES} OSM exports in ${leaders.size} batch${leaders.size === 1 ? '' : 'es'}); ${FEATURES} reviewer mails, ${FEATURES} contributor mails and ${FEATURES} agency notices, each exactly once`;
    });
  }, 90_000);

  it('4 a push acknowledged by webhook A and replayed to webhook B deploys once', async () => {
    await step('4 a push acknowledged by webhook A and replayed to webhook B deploys once', async () => {
      const [a, b] = [stack.webhooks[0]!.name, stack.webhooks[1]!.name];
      const commit = randomBytes(20).toString('hex');
      // A GitLab push to the develop target: the token in X-Gitlab-Token, the delivery's id in Idempotency-Key.
      const push = (replica: string, delivery: string) =>
        stack.request(DOMAINS.webhook, 'POST', '/webhook', {
          replica,
          body: pushPayload('develop', commit),
          headers: { 'x-gitlab-event': 'Push Hook', 'x-gitlab-token': stack.webhookSecrets.SECRET_DEVELOP!, 'idempotency-key': delivery },
        });
      const delivery = randomBytes(16).toString('hex');
      const acknowledged = await push(a, delivery);
      expect([acknowledged.status, replicaOf(acknowledged)], acknowledged.text).toEqual([202, a]);
      const id = String((JSON.parse(acknowledged.text) as { deploymentId: string }).deploymentId);
      // The git host redelivers it (same delivery id), and someone replays the recorded body under a new id, both to B.
      const redelivered = await push(b, delivery);
      expect([redelivered.status, replicaOf(redelivered)], redelivered.text).toEqual([200, b]);
      expect(JSON.parse(redelivered.text)).toMatchObject({ status: 'duplicate', reason: 'delivery', deploymentId: id });
      const replayed = await push(b, randomBytes(16).toString('hex'));
      expect(replayed.status, replayed.text).toBe(200);
      expect(JSON.parse(replayed.text)).toMatchObject({ status: 'duplicate', deploymentId: id });
      const deployment = await eventually(`deployment ${id} finished, read through ${b}`, async () => {
        const answer = await stack.request(DOMAINS.webhook, 'GET', `/deployments/${id}`, { replica: b, headers: { authorization: `Bearer ${stack.webhookAdminToken}` } });
        const d = answer.status === 200 ? (JSON.parse(answer.text) as { state: string; deployedCommit?: string }) : undefined;
        return d && !['queued', 'running'].includes(d.state) ? d : undefined;
      }, 20_000);
      expect(deployment).toMatchObject({ state: 'succeeded', deployedCommit: commit });
      // Live now: one more replay to B is still no deploy.
      const afterwards = await push(b, randomBytes(16).toString('hex'));
      expect(JSON.parse(afterwards.text)).toMatchObject({ status: 'duplicate', reason: 'live', deploymentId: id });
      const runs = stack.deploys().filter((r) => r.commit === commit);
      expect(runs.map((r) => r.event)).toEqual(['start', 'end']);
      return `${a} acknowledged ${id} (202); ${b} answered the redelivery (same id), the replay (new id) and a replay once live with 200 duplicate; the deploy script ran once`;
    });
  }, 60_000);

  it('nothing outlives the rehearsal: every process of the stack has exited once it is stopped', async () => {
    const processes = [...stack.apis, ...stack.workers, ...stack.webhooks, stack.proxy];
    await stack.stop();
    const alive = processes.filter((p) => {
      try {
        process.kill(-p.pid, 0);
        return true;
      } catch {
        return false;
      }
    });
    expect(alive.map((p) => p.name)).toEqual([]);
    console.log(`replica rehearsal: ${results.filter((r) => r.ok).length} of ${results.length} steps passed; ${processes.length} processes stopped`);
  }, 30_000);
});
