/**
 * Authentication overhead benchmark (`npm run bench -- auth`).
 *
 * GET /api/features/:id with 16 concurrent clients (autocannon), in one run, authenticated four ways:
 *   - none (the baseline),
 *   - a JWT verified against the issuer's JWKS (keys cached),
 *   - a Kratos session cookie (whoami cached for SESSION_CACHE_SECONDS = 15 s),
 *   - an opaque Hydra access token (introspection cached until expiry, at most 300 s),
 * and prints each one's throughput relative to the baseline (target ≥ 0.9× for JWTs, which the API
 * remembers once verified until exp; ≥ 0.8× for the other cached paths).
 *
 * The API runs as its own process (`services/api/src/server.ts`, configured by environment like in
 * production), so its CPU is its own. Kratos and Hydra are the contract-checked doubles of
 * identity/test/doubles in this process; the run fails if any exchange broke their OpenAPI contracts.
 * Scenarios are run in rounds with a rotating order so machine-load drift hits all of them alike; the
 * median req/s over the rounds is compared. Database: BENCH_DATABASE_URL or TEST_DATABASE_URL (a
 * scratch database is created and dropped), otherwise an in-memory embedded PGlite.
 * BENCH_QUICK=1 runs a short smoke version.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import autocannon from 'autocannon';
import pg from 'pg';
import { TestClock } from '../services/shared/testing/ory/clock.js';
import { migrate } from '../services/api/src/db/migrate.js';
import { startOryDoubles } from '../services/api/test/identity-harness.js';
import { issueOpaqueToken } from '../test/doubles/ory/code-flow.js';
import { startTestIssuer } from '../test/helpers/test-issuer.js';
import { median, peakRssMiB, printTable, ratio } from './stats.js';
import { openBenchDatabase, startApiProcess } from './support.js';

const quick = process.env.BENCH_QUICK === '1';
const ROUNDS = quick ? 1 : 3;
const SECONDS = quick ? 2 : 6;
const FEATURE_ID = 'bench-auth-feature';

async function main(): Promise<void> {
  const database = await openBenchDatabase('auth');
  const dataDir = mkdtempSync(join(tmpdir(), 'bench-auth-'));
  const clock = new TestClock();
  const { kratos, hydra } = await startOryDoubles(clock, 3600);
  const issuer = await startTestIssuer();
  let api: Awaited<ReturnType<typeof startApiProcess>> | undefined;
  try {
    const pool = new pg.Pool({ connectionString: database.url, max: 2 });
    await migrate(pool);
    await pool.query(
      `INSERT INTO features.features (id, name, kategorie, geom) VALUES ($1, 'Benchmark', 'denkmal', ST_SetSRID(ST_MakePoint(13.4, 52.5), 4326))`,
      [FEATURE_ID],
    );
    await pool.end();

    api = await startApiProcess({
      DATABASE_URL: database.url,
      DATA_DIR: dataDir,
      AUTH_JWKS_URL: issuer.jwksUrl,
      AUTH_ISSUER: issuer.issuer,
      KRATOS_PUBLIC_URL: kratos.public.url,
      HYDRA_ADMIN_URL: hydra.admin.url,
    });

    const identity = kratos.addIdentity({ email: 'bench@example.org', name: 'Bench', password: 'x', role: 'admin' });
    const session = kratos.createSession(identity.id).token;
    const opaque = await issueOpaqueToken(hydra, 'bench-opaque', { role: 'admin', email: 'opaque@example.org' });
    const jwt = await issuer.sign({ sub: 'bench-jwt', role: 'admin' }, { expiresIn: '1h' });
    const scenarios: Array<{ name: string; headers: Record<string, string> }> = [
      { name: 'unauthenticated', headers: {} },
      { name: 'JWT (JWKS)', headers: { authorization: `Bearer ${jwt}` } },
      { name: 'Kratos session (cached whoami)', headers: { cookie: `ory_kratos_session=${session}` } },
      { name: 'Hydra opaque token (cached introspection)', headers: { authorization: `Bearer ${opaque}` } },
    ];

    // Each credential really authenticates (an admin-only route answers 200), and warms its cache.
    for (const scenario of scenarios.slice(1)) {
      const res = await fetch(`${api.base}/api/users`, { headers: scenario.headers });
      if (res.status !== 200) throw new Error(`${scenario.name}: GET /api/users answered ${res.status}, the credential is not accepted`);
    }

    const url = `${api.base}/api/features/${FEATURE_ID}`;
    // Warm-up (not measured): JIT, connection pool and caches settle before the first scenario counts.
    for (const scenario of scenarios) await autocannon({ url, connections: 16, duration: quick ? 1 : 2, headers: scenario.headers });
    const samples = new Map<string, Array<{ rps: number; p50: number; p99: number }>>(scenarios.map((s) => [s.name, []]));
    const whoamiBefore = kratos.public.count('toSession');
    const introspectBefore = hydra.admin.count('introspectOAuth2Token');
    for (let round = 0; round < ROUNDS; round++) {
      const order = scenarios.map((_, i) => scenarios[(i + round) % scenarios.length]!);
      for (const scenario of order) {
        const result = await autocannon({ url, connections: 16, duration: SECONDS, headers: scenario.headers });
        if (result.non2xx > 0 || result.errors > 0) throw new Error(`${scenario.name}: ${result.non2xx} non-2xx answers, ${result.errors} errors`);
        samples.get(scenario.name)!.push({ rps: result.requests.average, p50: result.latency.p50, p99: result.latency.p99 });
      }
    }

    const baseline = median(samples.get('unauthenticated')!.map((s) => s.rps));
    const rows = scenarios.map(({ name }) => {
      const runs = samples.get(name)!;
      const rps = median(runs.map((s) => s.rps));
      return {
        scenario: name,
        'req/s (median)': Math.round(rps),
        'req/s per round': runs.map((s) => Math.round(s.rps)).join(' / '),
        'p50 ms': median(runs.map((s) => s.p50)),
        'p99 ms': median(runs.map((s) => s.p99)),
        'vs unauthenticated': ratio(rps, baseline),
        target: name === 'unauthenticated' ? '' : name.startsWith('JWT') ? '≥ 0.90×' : '≥ 0.80×',
      };
    });
    console.log(`\ndatabase: ${database.kind}; GET /api/features/:id, 16 connections, ${ROUNDS} rounds × ${SECONDS} s per scenario, rotating order`);
    printTable(rows);
    console.log(
      `Ory calls during the load: whoami ${kratos.public.count('toSession') - whoamiBefore}, introspection ${hydra.admin.count('introspectOAuth2Token') - introspectBefore}; API peak RSS ${(await peakRssMiB(api.child.pid!)).toFixed(0)} MiB`,
    );
    const violations = [...kratos.violations, ...hydra.violations];
    if (violations.length > 0) throw new Error(`Ory contract violations:\n${violations.join('\n')}`);
  } finally {
    await api?.stop();
    await Promise.all([kratos.close(), hydra.close(), issuer.close()]);
    await database.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

await main();
