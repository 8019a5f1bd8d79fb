/**
 * The replica rehearsal's stack (issue 30, docs/infra.md "The replica rehearsal"): on this machine,
 * API processes, stand-alone QC workers and webhook processes, all on one fresh PostgreSQL database,
 * behind one real Caddy with the stack's own rendered Caddyfile. What stands outside the platform is a
 * stand-in: the token issuer (a JWKS), the mail relay (services/shared/testing/smtp.ts), the agency's
 * endpoint, and the webhook's deploy script (services/webhook/test/support/replica-deploy.sh, which records
 * each deploy's start and end in one file and makes the commit live).
 *
 * The proxy is the stack's Caddyfile (infra/caddy.ts renderCaddyfile of infra/routes.ts proxyRoutes,
 * plain HTTP on a loopback port as the Caddy tests run it) with one change: each upstream line names
 * every replica instead of one container, round robin, as a Kubernetes Service or Caddy's own load
 * balancing would spread requests; and a request carrying `X-Rehearsal-Replica: api-2` goes to that
 * replica alone, so a step can say "through A, then from B". Every answer names the replica that gave
 * it (`X-Rehearsal-Upstream`). The same for the webhook's upstream (webhook-1, webhook-2).
 */
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, request as httpRequest, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { renderCaddyfile } from '../../../infra/caddy.js';
import { proxyRoutes } from '../../../infra/routes.js';
import { EXAMPLE_DOMAINS } from '../../../infra/testing/caddy-runner.js';
import { closeGracefully, listen } from '../../../services/shared/http-server.js';
import { freePort } from '../../../services/shared/testing/ports.js';
import { startSmtpDouble, type SmtpDouble } from '../../../services/shared/testing/smtp.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/db.js';
import { startTestIssuer, type TestIssuer } from '../../helpers/test-issuer.js';
import { seedTargets } from '../../../services/webhook/test/support/webhook-harness.js';
import { ENTRY, REPO, startProcess, startService, type ServiceProcess } from './processes.js';

export const DOMAINS = EXAMPLE_DOMAINS;
/** The header that pins a request to one replica, and the one that names who answered. */
export const PIN_HEADER = 'X-Rehearsal-Replica';
export const UPSTREAM_HEADER = 'X-Rehearsal-Upstream';
/** Who is told of every submission (REVIEWER_EMAILS). */
export const REVIEWERS = 'qc-desk@example.org';

export interface ReplicaStackOptions {
  apis: number;
  workers: number;
  webhooks: number;
  /** RATE_LIMIT_WRITES_PER_MINUTE of every API replica. */
  writesPerMinute: number;
  /** How long the agency's endpoint takes to answer: a slow side effect keeps a worker busy, so the other takes the next job. */
  agencyDelayMs: number;
}

export interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  /** The body as it came (a tile is binary). */
  bytes: Buffer;
  text: string;
}

export interface AgencyDelivery {
  deliveryId: string;
  body: string;
}

/** One run of the webhook's deploy script, as replica-deploy.sh records it. */
export interface DeployRecord {
  event: 'start' | 'end';
  commit: string;
  pid: number;
  at: number;
}

export interface ReplicaStack {
  db: TestDatabase;
  issuer: TestIssuer;
  mail: SmtpDouble;
  /** Every POST the agency's endpoint received, in order. */
  agency: AgencyDelivery[];
  apis: ServiceProcess[];
  workers: ServiceProcess[];
  webhooks: ServiceProcess[];
  /** The webhook's target secrets by variable name (SECRET_MAIN, …) and its admin token. */
  webhookSecrets: Record<string, string>;
  webhookAdminToken: string;
  /** Every start and end of the deploy script so far, whichever replica ran it. */
  deploys(): DeployRecord[];
  proxy: ServiceProcess & { port: number };
  /** A request through the proxy to a domain of the stack; `replica` (api-1, …) pins it. */
  request(domain: string, method: string, path: string, options?: { token?: string; body?: unknown; headers?: Record<string, string>; replica?: string }): Promise<Answer>;
  /** Every process of the stack, stopped (process groups), and the stand-ins closed; the database dropped. */
  stop(): Promise<void>;
}

/** The line services/api/src/boot.ts logs once the API listens. */
const API_LISTENING = /"port":(\d+),"database"/;
/** The line services/api/src/qc/worker.ts logs once graphile-worker runs. */
const WORKER_STARTED = /"msg":"QC worker started"/;
/** The line services/webhook/src/boot.ts logs once the webhook listens. */
const WEBHOOK_LISTENING = /"port":(\d+),"host".*"msg":"webhook server listening"/;

/**
 * The webhook's least-privileged role on the rehearsal's database, as docs/webhook.md ("More than one
 * replica") has an operator create it: LOGIN, CONNECT, and the schema `webhook` it owns. Returns its
 * connection URL and a function that drops the role (after the database is gone).
 */
async function webhookRole(db: TestDatabase): Promise<{ url: string; drop: () => Promise<void> }> {
  const name = `fp_replicas_webhook_${process.pid}_${randomBytes(3).toString('hex')}`;
  const password = randomBytes(16).toString('hex');
  const database = new URL(db.url).pathname.slice(1);
  await db.pool.query(`CREATE ROLE ${pg.escapeIdentifier(name)} LOGIN PASSWORD ${pg.escapeLiteral(password)}`);
  await db.pool.query(`GRANT CONNECT ON DATABASE ${pg.escapeIdentifier(database)} TO ${pg.escapeIdentifier(name)}`);
  await db.pool.query(`CREATE SCHEMA webhook AUTHORIZATION ${pg.escapeIdentifier(name)}`);
  const url = new URL(db.url);
  url.username = name;
  url.password = password;
  const drop = async () => {
    const admin = new pg.Client({ connectionString: process.env.TEST_DATABASE_URL });
    await admin.connect();
    try {
      await admin.query(`DROP ROLE IF EXISTS ${pg.escapeIdentifier(name)}`);
    } finally {
      await admin.end();
    }
  };
  return { url: url.toString(), drop };
}

/** One request to 127.0.0.1:<port> with this Host (node:http: fetch would not let the Host be set). */
function sendTo(port: number, method: string, host: string, path: string, headers: Record<string, string>, body?: string): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: '127.0.0.1', port, method, path, headers: { host, ...headers }, timeout: 30_000 }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () => {
        const bytes = Buffer.concat(chunks);
        resolve({ status: res.statusCode ?? 0, headers: res.headers, bytes, text: bytes.toString('utf8') });
      });
    });
    req.on('timeout', () => req.destroy(new Error(`${method} ${host}${path}: no answer within 30 s`)));
    req.on('error', reject);
    req.end(body);
  });
}

async function startAgencyStandIn(delayMs: number): Promise<{ server: Server; port: number; received: AgencyDelivery[] }> {
  const received: AgencyDelivery[] = [];
  const server = createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => (body += chunk.slice(0, 1_000_000)));
    req.on('end', () => {
      received.push({ deliveryId: String(req.headers['x-agency-delivery'] ?? ''), body });
      setTimeout(() => res.writeHead(204).end(), delayMs);
    });
  });
  return { server, port: await listen(server, 0, '127.0.0.1'), received };
}

/**
 * The stack's Caddyfile for these routes with each `reverse_proxy <upstream>` line replaced by the
 * replicas: one pinned `reverse_proxy` per replica (matched by PIN_HEADER; Caddy orders a directive
 * with a matcher before the same directive without one), then all of them round robin. The rest of
 * each site block (the /admin guard, headers, compression) stays as rendered, in front of them.
 */
export function replicaCaddyfile(port: number, upstreams: Record<string, { name: string; address: string }[]>): string {
  const routes = proxyRoutes(DOMAINS, [], { selfServiceUi: false }).filter((r) => upstreams[r.upstream]);
  const rendered = renderCaddyfile({ acmeEmail: 'ops@example.org', internalCidrs: ['10.0.0.0/8'], routes, plainHttpPort: port });
  return rendered.replace(/^\treverse_proxy (\S+)$/gm, (line, upstream: string) => {
    const replicas = upstreams[upstream];
    if (!replicas) return line;
    const answer = `\t\theader_down ${UPSTREAM_HEADER} {http.reverse_proxy.upstream.hostport}`;
    return [
      ...replicas.flatMap((r) => [`\t@pin_${r.name.replace(/\W/g, '_')} header ${PIN_HEADER} ${r.name}`, `\treverse_proxy @pin_${r.name.replace(/\W/g, '_')} ${r.address} {`, answer, '\t}']),
      `\treverse_proxy ${replicas.map((r) => r.address).join(' ')} {`,
      '\t\tlb_policy round_robin',
      answer,
      '\t}',
    ].join('\n');
  });
}

export async function startReplicaStack(options: ReplicaStackOptions): Promise<ReplicaStack> {
  const scratch = mkdtempSync(join(tmpdir(), 'replica-rehearsal-'));
  const started: ServiceProcess[] = [];
  const closers: (() => Promise<void>)[] = [];
  let stopping: Promise<void> | undefined;
  const stop = () =>
    (stopping ??= (async () => {
      await Promise.all(started.map((p) => p.stop()));
      for (const close of closers.reverse()) await close().catch(() => undefined);
      rmSync(scratch, { recursive: true, force: true });
    })());
  try {
    const db = await createTestDatabase();
    let dropRole: () => Promise<void> = async () => undefined;
    // The role goes after the database (it owns a schema in it).
    closers.push(async () => {
      await db.close();
      await dropRole();
    });
    const webhookDb = options.webhooks > 0 ? await webhookRole(db) : undefined;
    if (webhookDb) dropRole = webhookDb.drop;
    const issuer = await startTestIssuer();
    closers.push(() => issuer.close());
    const mail = await startSmtpDouble();
    closers.push(() => mail.stop());
    const agency = await startAgencyStandIn(options.agencyDelayMs);
    closers.push(() => closeGracefully(agency.server, 500));

    // As the stack declares them (infra/stack/settings.ts apiEnvironment, workerEnvironment), but
    // with JWT access tokens from the stand-in issuer instead of Hydra's introspection.
    const apiEnv = (i: number): Record<string, string> => ({
      NODE_ENV: 'production',
      PORT: '0',
      DATABASE_URL: db.url,
      DATA_DIR: join(scratch, `api-${i}`),
      AUTH_JWKS_URL: issuer.jwksUrl,
      AUTH_ISSUER: issuer.issuer,
      RATE_LIMIT_WRITES_PER_MINUTE: String(options.writesPerMinute),
      // Caddy reaches the replicas over loopback here (the stack: a private network, `uniquelocal`).
      API_TRUST_PROXY: 'loopback',
      WORKER_ENABLED: 'false',
      LOG_LEVEL: 'info',
    });
    const workerEnv = (i: number): Record<string, string> => ({
      NODE_ENV: 'production',
      DATABASE_URL: db.url,
      DATA_DIR: join(scratch, `worker-${i}`),
      WEB_PUBLIC_URL: 'https://app.example.org',
      MAIL_FROM: 'Feature platform <noreply@example.org>',
      SMTP_URL: mail.url,
      REVIEWER_EMAILS: REVIEWERS,
      AGENCY_WEBHOOK_URL: `http://127.0.0.1:${agency.port}/notices`,
      AGENCY_WEBHOOK_SECRET: randomBytes(32).toString('hex'),
      // No OSM or Wikidata account: those exports are recorded as skipped, without a request out.
      OSM_CONFLATION: 'false',
      // One job at a time per worker, so that while one is busy the other must take the next.
      WORKER_CONCURRENCY: '1',
      WORKER_POLL_INTERVAL_MS: '200',
      LOG_LEVEL: 'info',
    });
    // Two replicas on one host: the same targets, secrets, admin token and DEPLOY_ROOT
    // (docs/webhook.md "More than one replica"); the deploy script is the recording stand-in.
    const webhookSecrets = Object.fromEntries(seedTargets().map((t) => [t.secret, randomBytes(32).toString('hex')]));
    const webhookAdminToken = randomBytes(24).toString('hex');
    const deployRecords = join(scratch, 'deploys.jsonl');
    const webhookEnv = (i: number): Record<string, string> => ({
      ...webhookSecrets,
      WEBHOOK_DATABASE_URL: webhookDb!.url,
      WEBHOOK_PORT: '0',
      WEBHOOK_ADMIN_TOKEN: webhookAdminToken,
      WEBHOOK_STATE_DIR: join(scratch, `webhook-${i}`),
      WEBHOOK_TRUST_PROXY: 'loopback',
      DEPLOY_ROOT: join(scratch, 'sites'),
      DEPLOY_SCRIPT: join(REPO, 'services/webhook/test/support/replica-deploy.sh'),
      RECORD_DEPLOY_FILE: deployRecords,
      RECORD_DEPLOY_SLEEP: '0.3',
      DEPLOY_ENV_PASS: 'RECORD_DEPLOY_FILE RECORD_DEPLOY_SLEEP',
      LOG_LEVEL: 'info',
    });
    for (let i = 1; i <= options.apis; i++) mkdirSync(join(scratch, `api-${i}`));
    for (let i = 1; i <= options.workers; i++) mkdirSync(join(scratch, `worker-${i}`));
    // All at once: on two cores the start (tsx compiling, migrations checked) is the slow part.
    const starting = [
      ...Array.from({ length: options.apis }, (_, i) => startService(`api-${i + 1}`, ENTRY.api, apiEnv(i + 1), API_LISTENING)),
      ...Array.from({ length: options.workers }, (_, i) => startService(`worker-${i + 1}`, ENTRY.worker, workerEnv(i + 1), WORKER_STARTED)),
      ...Array.from({ length: options.webhooks }, (_, i) => startService(`webhook-${i + 1}`, ENTRY.webhook, webhookEnv(i + 1), WEBHOOK_LISTENING)),
    ];
    const outcomes = await Promise.allSettled(starting);
    for (const o of outcomes) if (o.status === 'fulfilled') started.push(o.value);
    const failed = outcomes.find((o): o is PromiseRejectedResult => o.status === 'rejected');
    if (failed) throw failed.reason;
    const apis = started.filter((p) => p.name.startsWith('api-'));
    const workers = started.filter((p) => p.name.startsWith('worker-'));
    const webhooks = started.filter((p) => p.name.startsWith('webhook-'));

    const proxyPort = await freePort();
    const caddyfile = join(scratch, 'Caddyfile');
    const upstreamOf = (domain: string) => proxyRoutes(DOMAINS, [], { selfServiceUi: false }).find((r) => r.domain === domain)!.upstream;
    const replicas = (processes: ServiceProcess[]) => processes.map((p) => ({ name: p.name, address: `127.0.0.1:${p.port}` }));
    writeFileSync(caddyfile, replicaCaddyfile(proxyPort, { [upstreamOf(DOMAINS.api)]: replicas(apis), ...(webhooks.length ? { [upstreamOf(DOMAINS.webhook)]: replicas(webhooks) } : {}) }));
    const caddyHome = join(scratch, 'caddy');
    mkdirSync(caddyHome);
    const caddy = await startProcess('proxy', ['caddy', 'run', '--config', caddyfile, '--adapter', 'caddyfile'], { HOME: caddyHome, XDG_DATA_HOME: caddyHome, XDG_CONFIG_HOME: caddyHome }, /serving initial configuration/, 20_000);
    started.push(caddy);
    const proxy = Object.assign(caddy, { port: proxyPort });

    const request: ReplicaStack['request'] = (domain, method, path, o = {}) => {
      const headers: Record<string, string> = { ...(o.headers ?? {}) };
      if (o.token) headers.authorization = `Bearer ${o.token}`;
      if (o.replica) headers[PIN_HEADER] = o.replica;
      let body: string | undefined;
      if (o.body !== undefined) {
        body = JSON.stringify(o.body);
        headers['content-type'] ??= 'application/json';
      }
      return sendTo(proxy.port, method, domain, path, headers, body);
    };
    const deploys = () =>
      existsSync(deployRecords)
        ? readFileSync(deployRecords, 'utf8')
            .split('\n')
            .filter(Boolean)
            .map((line) => JSON.parse(line) as DeployRecord)
        : [];
    return { db, issuer, mail, agency: agency.received, apis, workers, webhooks, webhookSecrets, webhookAdminToken, deploys, proxy, request, stop };
  } catch (error) {
    await stop();
    throw error;
  }
}
