/**
 * The rehearsal's end-to-end steps: the platform driven through the proxy (Caddy on its own loopback
 * IP, ports 80/443, its internal CA) as users and git hosts would drive it. Host names never touch
 * /etc/hosts: Chromium maps them with --host-resolver-rules, Node connects to the proxy's IP with the
 * name as TLS server name and Host header.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { execFile, execFileSync } from 'node:child_process';
import { createHmac, randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { request } from 'node:https';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Secret, TOTP } from 'otpauth';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { freePort } from '../../services/shared/testing/ports.js';
import { targetUids } from '../stack/targets.js';
import { spawnInNetnsOf } from './netns.js';
import { startCluster } from './postgres.js';
import type { MediaWikiDouble } from '../../services/shared/testing/mediawiki-api.js';
import type { OsmApiDouble } from '../../services/shared/testing/osm-api.js';
import type { SmtpDouble } from '../../services/shared/testing/smtp.js';
import type { RehearsalStack } from './runner.js';

export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

/** Code a team could push: binds the ports of SQUAT as soon as it can and reports every connection it gets. */
const SQUATTER = `
import { createServer } from 'node:net';
for (const { name, port } of JSON.parse(process.env.SQUAT)) {
  const take = () => {
    const server = createServer((socket) => {
      console.log('connection ' + name);
      socket.end('HTTP/1.1 200 OK\\r\\nContent-Length: 8\\r\\n\\r\\nsquatter');
    });
    server.once('error', () => setTimeout(take, 50));
    server.listen(port, '0.0.0.0', () => console.log('bound ' + name));
  };
  take();
}
`;

export interface StepResult {
  step: string;
  ok: boolean;
  detail?: string;
  ms: number;
}

export interface StepContext {
  /** The config the program ran with (domains, targets file). */
  domains: Record<string, string>;
  parentDomain: string;
  /** The fixture repository the targets file points at, and the target to push to. */
  fixtureRepo: string;
  pushTarget: { key: string; branch: string; domain: string; secretName: string; provider: 'github' | 'gitlab'; deployPath: string; port: number };
  /** Another target, whose site container plays the squatter in step 6c. */
  otherTarget: { key: string; deployPath: string; port: number };
  /** The webhook's port as the stack declares it (the port a squatter would wait for). */
  webhookPort: number;
  /**
   * Stand-ins outside the stack: the mail relay (SMTP), who reviews, what the agency received, and the
   * OSM API 0.6 and Wikibase the exports go to.
   */
  outside: { mail: SmtpDouble; reviewers: string; agency: { path: string; body: string }[]; osm: OsmApiDouble; wiki: MediaWikiDouble };
  /** Figures the steps measure (name → value with its unit), printed after the steps. */
  figures: Record<string, string>;
  /**
   * `--web-app`: the platform's own web app (services/web of this repository's HEAD, as a repository
   * the `main` target points at) is pushed to `main` and walked (step 6e); the npm cache the target's
   * builder reads is seeded from this machine's (`npmCache`), since a builder here has no way out.
   */
  webApp?: { repo: string; npmCache: string; target: { key: string; domain: string; deployPath: string; secretName: string; provider: 'github' | 'gitlab' } };
  say(line: string): void;
}

/** A QC job as the API shows it (GET /api/features/{id}/reviews, GET /api/qc/jobs). */
interface JobView {
  id: number;
  task: string;
  status: string;
  reason: string | null;
  /** The transient error of the last attempt of a job that is retrying. */
  lastError: string | null;
  result: Record<string, unknown> | null;
}

/** A job waiting on the desk with its OSM plan (docs/qc.md "Nothing reaches OSM unseen"). */
interface PlannedJob extends JobView {
  featureId: string;
  plan: { action: string; proposed: unknown; tagChanges: { key: string; before: string | null; after: string | null }[] } | null;
}

/** What the QC worker records when it cannot reach a remote side at all (no way out). */
const CUT_OFF = /ECONNREFUSED|EHOSTUNREACH|ENETUNREACH|ETIMEDOUT|fetch failed|socket hang up/;

interface Reply {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

/** An HTTPS request through the proxy, trusting only Caddy's internal CA. */
function viaProxy(stack: RehearsalStack, url: string, init: { method?: string; headers?: Record<string, string>; body?: string } = {}): Promise<Reply> {
  const proxy = stack.proxy!;
  const target = new URL(url);
  const ca = readFileSync(join(proxy.dataDir, 'caddy/pki/authorities/local/root.crt'));
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: proxy.ip,
        port: proxy.httpsPort,
        servername: target.hostname,
        ca,
        method: init.method ?? 'GET',
        path: `${target.pathname}${target.search}`,
        headers: { host: target.hostname, ...(init.headers ?? {}) },
        timeout: 30_000,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString('utf8') }));
      },
    );
    req.on('error', reject);
    req.on('timeout', () => req.destroy(new Error(`timeout: ${url}`)));
    req.end(init.body);
  });
}

/** What the running step waits for now: set by until() and doing(), named when its deadline passes. */
const waiting = new AsyncLocalStorage<{ what: string }>();

/** Names what the running step waits for next (its deadline's failure says it). */
export function doing(what: string): void {
  const tracker = waiting.getStore();
  if (tracker) tracker.what = what;
}

/** Every browser context of the rehearsal: Chromium trusts Caddy's internal CA only through this (the CA is made per run). */
const CONTEXT = { ignoreHTTPSErrors: true } as const;

/** A step's deadline passed. */
class Overdue extends Error {}

/** A step's deadline unless it names its own: no step may hang the rehearsal. */
const STEP_LIMIT_MS = 120_000;

interface StepOptions {
  /** The step's deadline; on expiry it fails naming what it waited for and `logs()`. */
  limitMs?: number;
  /** The last log lines of the containers the step depends on. */
  logs?: () => string;
}

/**
 * Runs one step with a deadline. A step that does not finish in time fails, naming what it waited
 * for and its containers' last log lines, and the rehearsal goes on (what it left running is
 * abandoned; the browser and the stack are stopped at the end, each bounded as well).
 */
export async function step(results: StepResult[], name: string, run: () => Promise<string | undefined>, options: StepOptions = {}): Promise<boolean> {
  const began = Date.now();
  const limitMs = options.limitMs ?? STEP_LIMIT_MS;
  if (process.env.REHEARSAL_DEBUG) console.log(`step ${name.slice(0, 60)}`);
  const tracker = { what: 'the step to begin' };
  let timer: NodeJS.Timeout | undefined;
  const running = waiting.run(tracker, run);
  running.catch(() => undefined);
  const overdue = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Overdue(`not finished within ${limitMs / 1000} s, waiting for ${tracker.what}${options.logs ? `; ${options.logs()}` : ''}`)), limitMs);
  });
  try {
    const detail = await Promise.race([running, overdue]);
    results.push({ step: name, ok: true, ...(detail ? { detail } : {}), ms: Date.now() - began });
    return true;
  } catch (error) {
    const message = (error as Error).message;
    const detail = error instanceof Overdue ? message : message.split('\n').slice(0, 4).join(' ');
    results.push({ step: name, ok: false, detail, ms: Date.now() - began });
    return false;
  } finally {
    clearTimeout(timer);
  }
}

function assert(condition: unknown, message: string): asserts condition {
  if (!condition) throw new Error(message);
}

/** Thrown by a probe that has seen the outcome will not come (a delivery refused): until() stops at once. */
class GaveUp extends Error {}

export async function until<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs: number): Promise<T> {
  doing(what);
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  while (Date.now() < deadline) {
    try {
      const value = await probe();
      if (value !== undefined) return value;
    } catch (error) {
      if (error instanceof GaveUp) throw error;
      last = error;
    }
    await new Promise((r) => setTimeout(r, 300));
  }
  throw new Error(`${what} not within ${timeoutMs / 1000} s${last ? ` (${(last as Error).message})` : ''}`);
}

/** Where step 2 puts the journey's feature. */
const JOURNEY_POINT = { lon: 13.4, lat: 52.5 };

/**
 * What an anonymous reader gets from GeoServer through the proxy's public route: the public layer by
 * WFS GetFeature (the ids), WMS GetMap as SVG over a small box around `at` (shapes drawn), and whether
 * the editors' layer stays hidden. The layers are the ones the provisioning job published (the view
 * features.public_features, migration 012, and the table).
 */
async function anonymousView(stack: RehearsalStack, geo: string, at: { lon: number; lat: number }) {
  const types = [...(stack.geoserver?.state.featureTypes.entries() ?? [])].map(([key, ft]) => ({ workspace: key.split('/')[0]!, ...ft }));
  const publicType = types.find((t) => t.nativeName === 'public_features');
  const editorsType = types.find((t) => t.nativeName === 'features');
  if (!publicType || !editorsType) throw new Error(`GeoServer publishes ${types.map((t) => `${t.workspace}:${t.name}`).join(', ') || 'nothing'}: no public and editors' layer (step 5)`);
  const layer = `${publicType.workspace}:${publicType.name}`;
  const editorsLayer = `${editorsType.workspace}:${editorsType.name}`;
  const get = (path: string) => viaProxy(stack, `https://${geo}/geoserver/${path}`);
  const getFeature = (typeName: string) => get(`wfs?service=WFS&version=2.0.0&request=GetFeature&typeNames=${encodeURIComponent(typeName)}&outputFormat=application%2Fjson&count=1000`);
  const d = 0.001;
  // WMS 1.3.0 with EPSG:4326: latitude first.
  const box = [at.lat - d, at.lon - d, at.lat + d, at.lon + d].join(',');
  const [wfs, wms, editors] = await Promise.all([
    getFeature(layer),
    get(`wms?service=WMS&version=1.3.0&request=GetMap&layers=${encodeURIComponent(layer)}&styles=&crs=EPSG%3A4326&bbox=${box}&width=256&height=256&format=image%2Fsvg%2Bxml`),
    getFeature(editorsLayer),
  ]);
  const ids = wfs.status === 200 ? (JSON.parse(wfs.body) as { features: { properties: { id?: string } }[] }).features.map((f) => String(f.properties.id)) : [];
  const drawn = wms.status === 200 && String(wms.headers['content-type']).startsWith('image/svg+xml') ? (wms.body.match(/<(circle|path)\b/g) ?? []).length : -1;
  return {
    layer,
    editorsLayer,
    ids,
    drawn,
    wfsStatus: wfs.status,
    wmsStatus: drawn >= 0 ? wms.status : 0,
    editorsHidden: editors.status >= 400 && !/"FeatureCollection"/.test(editors.body),
    problem: [wfs, wms, editors].filter((r) => r.status !== 200 || !/FeatureCollection|<svg/.test(r.body)).map((r) => `${r.status}: ${r.body.slice(0, 120)}`).join(' ; '),
  };
}

/** A command run without blocking the steps that run meanwhile (the web app's deploy, beside steps 1-6). */
const command = promisify(execFile);

const gitIn = (dir: string) => (...args: string[]) =>
  execFileSync('git', ['-C', dir, ...args], { encoding: 'utf8', env: { ...process.env, GIT_AUTHOR_NAME: 'R', GIT_AUTHOR_EMAIL: 'r@example.org', GIT_COMMITTER_NAME: 'R', GIT_COMMITTER_EMAIL: 'r@example.org' } }).trim();

/** A push of `after` to `branch`, signed as the target's git host signs it, delivered to the webhook through the proxy. */
async function signedPush(stack: RehearsalStack, webhookDomain: string, target: { secretName: string; provider: 'github' | 'gitlab' }, branch: string, after: string): Promise<void> {
  const secrets = await new Promise<Record<string, string>>((resolve) => (stack.program.webhookSecrets as { apply(f: (v: Record<string, string>) => void): void }).apply(resolve));
  const secret = secrets[target.secretName];
  assert(secret, `no webhook secret ${target.secretName} among the stack outputs`);
  const body = JSON.stringify({ ref: `refs/heads/${branch}`, after, repository: { name: 'site' } });
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (target.provider === 'github') {
    headers['x-github-event'] = 'push';
    headers['x-github-delivery'] = randomBytes(8).toString('hex');
    headers['x-hub-signature-256'] = `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`;
  } else {
    headers['x-gitlab-event'] = 'Push Hook';
    headers['x-gitlab-token'] = secret;
  }
  const delivered = await viaProxy(stack, `https://${webhookDomain}/webhook`, { method: 'POST', headers, body });
  assert(delivered.status === 202, `the webhook answered ${delivered.status}: ${delivered.body.slice(0, 200)}`);
}

interface SignedIn {
  accessToken: string;
  sessionCookie: string;
  context: BrowserContext;
}

export async function runSteps(stack: RehearsalStack, ctx: StepContext): Promise<StepResult[]> {
  const results: StepResult[] = [];
  const { domains } = ctx;
  /** The last log lines of these containers, for a step that ran out of time. */
  const logsOf = (names: string[]) => () =>
    names
      .map((name) => {
        const c = stack.containers.get(name);
        return `${name}: ${c ? c.log.slice(-4).map((l) => l.slice(0, 300)).join(' | ') || '(no log)' : 'not started'}`;
      })
      .join('; ');
  const push = ctx.pushTarget.deployPath;
  const app = ctx.webApp ? [`builder-${ctx.webApp.target.deployPath}`, `site-${ctx.webApp.target.deployPath}`] : [];
  /** Per step (its number): the containers it depends on, and a deadline longer than the waits inside it. */
  const stepSettings: Record<string, { containers: string[]; limitMs?: number }> = {
    '1a': { containers: ['accounts-ui', 'kratos'] },
    '1b': { containers: ['login', 'hydra', 'kratos'] },
    '2': { containers: ['api'] },
    '3': { containers: ['api'] },
    '4': { containers: ['api', 'login', 'hydra'] },
    '4b': { containers: ['qc-worker'], limitMs: 150_000 },
    '4c': { containers: ['qc-worker'], limitMs: 360_000 },
    '5': { containers: ['geoserver-provision'] },
    '5b': { containers: ['geoserver', 'api'] },
    '5c': { containers: ['geoserver'] },
    '6': { containers: ['webhook', `builder-${push}`, `site-${push}`], limitMs: 240_000 },
    '6e': { containers: ['webhook', ...app], limitMs: 660_000 },
    '6f1': { containers: [...app.slice(1), 'login', 'kratos'], limitMs: 90_000 },
    '6f2': { containers: [...app.slice(1), 'api'], limitMs: 90_000 },
    '6f3': { containers: [...app.slice(1), 'api'], limitMs: 60_000 },
    '6f4': { containers: [...app.slice(1), 'login', 'kratos', 'api'], limitMs: 150_000 },
    '6f5': { containers: ['qc-worker', 'geoserver'], limitMs: 150_000 },
    '6d': { containers: [`site-${push}`, 'site-main'] },
    '6b': { containers: [`site-${push}`] },
    '6c': { containers: [`site-${ctx.otherTarget.deployPath}`] },
    '7': { containers: ['backup', 'features-db'], limitMs: 150_000 },
    '8': { containers: ['login', 'hydra', 'kratos', ...app.slice(1)] },
    '8b': { containers: [...app.slice(1), 'kratos'] },
  };
  const stepOf = (name: string, run: () => Promise<string | undefined>) => {
    const settings = stepSettings[name.split(' ')[0]!];
    return step(results, name, run, { ...(settings?.limitMs ? { limitMs: settings.limitMs } : {}), logs: logsOf(settings?.containers ?? []) });
  };
  const https = (host: string, path = '/') => `https://${host}${path}`;
  const kratos = stack.kratos;
  const hydra = stack.hydra;
  if (!stack.proxy || stack.containers.get('proxy')?.status !== 'healthy') {
    return [{ step: 'the proxy is up', ok: false, detail: 'the stack did not reach the proxy (see the container list)', ms: 0 }];
  }
  let browser: Browser | undefined;
  const signedIn = new Map<string, SignedIn>();
  const people = {
    contributor: { email: 'carla@example.org', name: 'Carla Contributor', password: `pw-${randomBytes(9).toString('base64url')}`, role: 'contributor' },
    // A reviewer approves exports to OSM and Wikidata: the API wants a second factor for it (AAL2), so
    // the reviewer has a TOTP app and signs in with its code.
    reviewer: { email: 'rudi@example.org', name: 'Rudi Reviewer', password: `pw-${randomBytes(9).toString('base64url')}`, role: 'reviewer', totpSecret: new Secret({ size: 20 }).base32 },
  } as Record<'contributor' | 'reviewer', { email: string; name: string; password: string; role: string; totpSecret?: string }>;
  // The client the stack synced into Hydra; its secret is in the clients-sync job's log, where the
  // operator reads it (shown once).
  const syncLog = stack.containers.get('clients-sync')?.log ?? [];
  const secretLine = syncLog.findIndex((l) => /^created\s+map-editor/.test(l));
  const clientSecret = secretLine >= 0 ? /client_secret[^:]*:\s*(\S+)/.exec(syncLog[secretLine + 1] ?? '')?.[1] : undefined;
  const callback = `https://app.${ctx.parentDomain}/auth/callback`;

  try {
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: [
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
        // Every name goes to the proxy's loopback IP; nothing else resolves.
        `--host-resolver-rules=MAP * ${stack.proxy.ip}, EXCLUDE localhost`,
      ],
    });

    /**
     * `--web-app`: the push of the web app to `main`, sent as soon as the stack is up, so that its build
     * (npm ci and astro build in the target's builder, most of the step's time) runs beside steps 1-6;
     * step 6e awaits it. Like any wait of the rehearsal it is bounded (600 s), and it gives up as soon as
     * the builder reports the deploy ended non-zero, naming the deploy's build log.
     */
    const startWebAppDeploy = async (app: NonNullable<StepContext['webApp']>) => {
      const builder = stack.containers.get(`builder-${app.target.deployPath}`);
      const deployDir = builder?.declaredEnv?.BUILDER_DEPLOY_DIR;
      const hostDeployDir = deployDir ? builder.mounts?.[deployDir] : undefined;
      assert(builder && hostDeployDir, `builder-${app.target.deployPath} has no deploy folder among its volumes`);
      const { siteUid, buildUid } = targetUids(app.target.deployPath);
      // The target's content collection (<deployDir>/shared/src/content, which the deploy script links over
      // the site's src/content): the editors' texts, which the stack leaves to the operator, who copies
      // them into the builder's volume before the first deploy (docs/rehearsal.md). Here the operator
      // copies the texts the repository starts with, with the modes the deploy script gives that folder.
      const content = join(hostDeployDir, 'shared', 'src', 'content');
      mkdirSync(content, { recursive: true });
      await command('cp', ['-r', '--no-preserve=mode,ownership', `${join(app.repo, 'services/web/src/content')}/.`, content]);
      await command('chown', ['-R', `0:${siteUid}`, join(hostDeployDir, 'shared')]);
      await command('find', [join(hostDeployDir, 'shared'), '-type', 'd', '-exec', 'chmod', '0750', '{}', '+']);
      await command('find', [content, '-type', 'f', '-exec', 'chmod', '0640', '{}', '+']);
      // The target's npm cache (deploy-branch.sh: <deployDir>/cache/npm under isolation), seeded from this
      // machine's: the tarballs (content-v2, 250 MB) as hard links that stay root's and read-only to the
      // build user, so no build can change this machine's cache through them; the index (index-v5, which
      // npm appends to on every hit) as copies the build user owns, with every folder.
      const cache = join(hostDeployDir, 'cache', 'npm', '_cacache');
      mkdirSync(cache, { recursive: true });
      const seeded = Date.now();
      await command('cp', ['-al', join(app.npmCache, '_cacache', 'content-v2'), join(cache, 'content-v2')]);
      await command('cp', ['-r', join(app.npmCache, '_cacache', 'index-v5'), join(cache, 'index-v5')]);
      const owner = `${buildUid}:${buildUid}`;
      await command('chown', ['-R', owner, join(cache, 'index-v5')]);
      await command('find', [join(hostDeployDir, 'cache'), '-type', 'd', '-exec', 'chown', owner, '{}', '+']);
      const seedS = ((Date.now() - seeded) / 1000).toFixed(1);
      const after = gitIn(app.repo)('rev-parse', 'HEAD');
      const pushed = Date.now();
      await signedPush(stack, domains.webhook!, app.target, app.target.key, after);
      const logged = builder.log.length;
      const home = await until(
        `${app.target.domain} serving the web app`,
        async () => {
          // The builder says when the deploy ended without going live (deploy-branch.sh's exit code).
          const ended = builder.log.slice(logged).find((line) => /"msg":"deploy ended"/.test(line) && !/"code":0\b/.test(line));
          if (ended) throw new GaveUp(`the deploy ended: ${ended.slice(0, 300)}`);
          const live = await viaProxy(stack, https(app.target.domain, '/'));
          return live.status === 200 && /<title>[^<]*Karte/.test(live.body) ? live.body : undefined;
        },
        600_000,
      ).catch((error: Error) => {
        const builderLog = builder.log.slice(-4).map((l) => l.slice(0, 300)).join(' | ');
        // The deploy's own log (deploy-branch.sh keeps a failed build's log in <deployDir>/logs).
        const logs = join(hostDeployDir, 'logs');
        const newest = existsSync(logs) ? readdirSync(logs).filter((f) => f.startsWith('npm-build-')).sort().at(-1) : undefined;
        const buildLog = newest ? readFileSync(join(logs, newest), 'utf8').split('\n').filter(Boolean).slice(-8).join(' | ') : '(no build log)';
        throw new Error(`${error.message}; builder-${app.target.deployPath}: ${builderLog}; ${newest ?? 'build log'}: ${buildLog.slice(0, 1500)}`);
      });
      return { after, home, seedS, deployedS: ((Date.now() - pushed) / 1000).toFixed(1) };
    };
    const webAppDeploy = ctx.webApp ? startWebAppDeploy(ctx.webApp) : undefined;
    webAppDeploy?.catch(() => undefined);

    /** Closes a browser context, naming it (and the service workers its pages started) as what the step waits for. */
    const closeContext = async (context: BrowserContext) => {
      doing(`a browser context to close (its service workers: ${context.serviceWorkers().map((w) => w.url()).join(', ') || 'none'})`);
      await context.close();
    };

    const signIn = async (who: keyof typeof people): Promise<SignedIn> => {
      assert(hydra?.clients.has('map-editor'), 'the map-editor client is not in Hydra: the clients-sync job did not sync it');
      assert(clientSecret, `no client secret in the clients-sync log: ${syncLog.slice(0, 4).join(' | ')}`);
      const person = people[who];
      // Chromium trusts Caddy's internal CA only through this flag (the CA is made per run).
      const context = await browser!.newContext(CONTEXT);
      const page = await context.newPage();
      const hops: string[] = [];
      // The client's callback (its web app) is not part of this stack: Hydra's redirect to it is the
      // result, read from the response that sends the browser there.
      let callbackUrl = '';
      page.on('response', (r) => {
        const location = r.headers().location;
        if (r.request().isNavigationRequest()) hops.push(`${r.status()} ${r.url().slice(0, 90)}${location ? ` → ${location.slice(0, 90)}` : ''}`);
        if (location?.startsWith(callback)) callbackUrl = new URL(location, r.url()).toString();
      });
      const state = randomBytes(12).toString('base64url');
      const authorize = new URL(https(domains.hydra!, '/oauth2/auth'));
      authorize.search = new URLSearchParams({
        client_id: 'map-editor',
        response_type: 'code',
        scope: 'openid offline_access',
        redirect_uri: callback,
        state,
        audience: 'geodata-api',
        // With a second factor enrolled, ask for it (RFC 9470): the token then says acr=aal2.
        ...(person.totpSecret ? { acr_values: 'aal2' } : {}),
      }).toString();
      await page.goto(authorize.toString()).catch((error: Error) => {
        throw new Error(`${error.message.split('\n')[0]}; hops: ${hops.slice(0, 8).join(' ; ')}`);
      });
      await page.getByLabel('E-mail').fill(person.email);
      await page.getByLabel('Password').fill(person.password);
      await page.getByRole('button', { name: 'Sign in' }).click();
      if (person.totpSecret) {
        // The second step: the login app's code form for Kratos' aal2 flow.
        const code = new TOTP({ secret: Secret.fromBase32(person.totpSecret) }).generate();
        await page.getByLabel('Authentication code').fill(code);
        await page.getByRole('button', { name: 'Confirm' }).click();
      }
      await until('the redirect to the client callback', async () => (callbackUrl ? true : undefined), 20_000).catch(() => {
        throw new Error(`sign-in did not reach the client's callback; hops: ${hops.slice(-5).join(' ; ')}`);
      });
      const code = new URL(callbackUrl).searchParams.get('code');
      assert(code && new URL(callbackUrl).searchParams.get('state') === state, `callback without code/state: ${callbackUrl}`);
      const token = await viaProxy(stack, https(domains.hydra!, '/oauth2/token'), {
        method: 'POST',
        headers: {
          'content-type': 'application/x-www-form-urlencoded',
          authorization: `Basic ${Buffer.from(`map-editor:${clientSecret}`).toString('base64')}`,
        },
        body: new URLSearchParams({ grant_type: 'authorization_code', code, redirect_uri: callback }).toString(),
      });
      assert(token.status === 200, `token endpoint answered ${token.status}: ${token.body.slice(0, 200)}`);
      const accessToken = (JSON.parse(token.body) as { access_token: string }).access_token;
      const cookies = await context.cookies(https(domains.api!));
      const session = cookies.find((c) => c.name === 'ory_kratos_session');
      assert(session, `no ory_kratos_session cookie for ${domains.api}; cookies: ${cookies.map((c) => `${c.name}@${c.domain}`).join(', ')}`);
      const result = { accessToken, sessionCookie: `${session.name}=${session.value}`, context };
      signedIn.set(who, result);
      await page.close();
      return result;
    };

    /**
     * Step 6f (`--web-app`): a user's day on the web app's own pages, in Chromium, by role and name.
     * The site's server reaches Kratos and the API through the proxy, as in the stack (runner.ts,
     * sitesReachProxy): without that path its protected pages answer 503.
     */
    const webAppDay = async (appDomain: string) => {
      const app = (path: string) => https(appDomain, path);
      const siteLog = () => {
        const site = [...stack.containers.values()].find((c) => c.name.startsWith('site-') && c.declaredEnv?.SITE_ENV_PUBLIC_BASE_URL === `https://${appDomain}`);
        return `${site?.name ?? 'site'}: ${(site?.log ?? []).slice(-4).map((l) => l.slice(0, 300)).join(' | ') || '(no log)'}`;
      };
      const withLog = (run: () => Promise<string | undefined>) => async () =>
        run().catch((error: Error) => {
          throw new Error(`${error.message.split('\n')[0]}; ${siteLog()}`);
        });
      /** Signs in on the app's /login through the platform's sign-in (Kratos, the login app); lands back on the app. */
      const signInOnApp = async (person: { email: string; password: string }) => {
        // German, the site's default language, whose names the web app's own tests find elements by.
        const context = await browser!.newContext({ ...CONTEXT, locale: 'de-DE' });
        context.setDefaultTimeout(30_000);
        const page = await context.newPage();
        if (process.env.REHEARSAL_DEBUG) page.on('framenavigated', (frame) => frame === page.mainFrame() && console.log(`  ${person.email} at ${frame.url().slice(0, 120)}`));
        await page.goto(app('/login'));
        await page.getByRole('link', { name: 'Mit dem Konto der Stadt anmelden' }).click();
        await page.getByLabel('E-mail').fill(person.email);
        await page.getByLabel('Password').fill(person.password);
        await page.getByRole('button', { name: 'Sign in', exact: true }).click();
        await page.waitForURL((url) => url.hostname === appDomain, { timeout: 30_000 });
        return { context, page };
      };
      const polls = async (what: string, count: () => Promise<number>, timeoutMs = 30_000) => until(what, async () => ((await count()) > 0 ? true : undefined), timeoutMs);
      const name = `Rehearsal Beet ${randomBytes(3).toString('hex')}`;
      let contributor: { context: BrowserContext; page: Page } | undefined;
      let drawnId = '';
      let drawnPlace = JOURNEY_POINT;
      let beforeDesk: Awaited<ReturnType<typeof anonymousView>> | undefined;
      let approvedOnDesk = false;
      try {
        const signedInOnApp = await stepOf(`6f1 the contributor signs in on ${appDomain} through the platform's sign-in (single sign-on) and opens the editor, a protected page the site's server checks with Kratos`, withLog(async () => {
          contributor = await signInOnApp(people.contributor);
          const editor = await contributor.page.goto(app('/features/new'));
          assert(editor?.status() === 200, `${appDomain}/features/new answered ${editor?.status() ?? 0} to the signed-in contributor: ${((await editor?.text()) ?? '').slice(0, 200)}`);
          await contributor.page.getByLabel('Geometrietyp').waitFor({ timeout: 20_000 });
          return `/login → ${domains.kratos} → the login app → back on ${appDomain}; /features/new 200`;
        }));
        const saved = signedInOnApp && (await stepOf('6f2 draws a polygon on the map, fills the form and saves it', withLog(async () => {
          const page = contributor!.page;
          const map = page.getByRole('region', { name: 'Karte der Objekte' });
          await page.getByLabel('Geometrietyp').selectOption('Polygon');
          const box = await map.boundingBox();
          assert(box, 'the map region has no box');
          for (const [x, y] of [[100, 80], [240, 80], [240, 200], [100, 200], [100, 80]] as const) {
            await page.mouse.click(box.x + x, box.y + y);
            await page.waitForTimeout(120);
          }
          await page.getByLabel('Name', { exact: true }).fill(name);
          await page.getByLabel('Kategorie', { exact: true }).selectOption('blumenbeet');
          await page.getByRole('button', { name: 'Speichern' }).click();
          await page.waitForURL((url) => /^\/features\/[^/]+$/.test(url.pathname) && url.pathname !== '/features/new', { timeout: 30_000 });
          drawnId = decodeURIComponent(new URL(page.url()).pathname.split('/').pop()!);
          const stored = await viaProxy(stack, https(domains.api!, `/api/features/${encodeURIComponent(drawnId)}`), { headers: { authorization: `Bearer ${signedIn.get('contributor')?.accessToken ?? ''}` } });
          const stored2 = stored.status === 200 ? (JSON.parse(stored.body) as { geometry?: { type?: string; coordinates?: number[][][] } }).geometry : undefined;
          const geometry = stored2?.type;
          assert(geometry === 'Polygon', `the API has ${drawnId} as ${geometry ?? `(status ${stored.status})`}, not a Polygon`);
          // Its middle (the mean of the outer ring's corners), where step 6f5 asks anonymous WMS for it.
          const ring = (stored2?.coordinates?.[0] ?? []).slice(0, -1);
          drawnPlace = { lon: ring.reduce((a, [x]) => a + x!, 0) / ring.length, lat: ring.reduce((a, [, y]) => a + y!, 0) / ring.length };
          return `${drawnId} saved, a Polygon in the API`;
        })));
        const submitted = saved && (await stepOf('6f3 submits it for review on its page', withLog(async () => {
          const page = contributor!.page;
          await page.getByLabel('Kommentar zur Einreichung').fill('Bei der Probe gezeichnet');
          await page.getByRole('button', { name: 'Zur Prüfung einreichen' }).click();
          await polls('the status "Eingereicht"', () => page.getByRole('status').filter({ hasText: 'Eingereicht' }).count());
          // What an anonymous reader of GeoServer gets before the desk approves it (step 6f5).
          doing('anonymous WFS and WMS before the approval on the desk');
          beforeDesk = await anonymousView(stack, domains.geo!, drawnPlace);
          return 'the page says Eingereicht';
        })));
        if (submitted) {
          await stepOf('6f4 the reviewer signs in on the app, finds it on the QC desk (/qc), gives the TOTP code at the step-up and approves it', withLog(async () => {
            const reviewer = await signInOnApp(people.reviewer);
            try {
              const page = reviewer.page;
              const atStepUp = () => new URL(page.url()).pathname === '/self-service/login';
              // Kratos' aal2 login, rendered by the login app: the code, then back to the page that asked.
              const stepUp = async () => {
                await page.getByLabel('Authentication code').fill(new TOTP({ secret: Secret.fromBase32(people.reviewer.totpSecret!) }).generate());
                await page.getByRole('button', { name: 'Confirm' }).click();
                await page.waitForURL((url) => url.hostname === appDomain);
              };
              // A reviewer with a second factor is asked for it on the desk already (whoami wants the
              // highest AAL available), at the latest on the review view.
              let steppedUp = '';
              await page.goto(app('/qc'));
              if (atStepUp()) {
                await stepUp();
                steppedUp = '/qc';
              }
              await page.getByRole('link', { name }).click();
              const review = `/qc/${encodeURIComponent(drawnId)}`;
              await page.waitForURL((url) => url.pathname === review || url.pathname === '/self-service/login');
              if (atStepUp()) {
                await stepUp();
                steppedUp ||= review;
              }
              assert(steppedUp, 'the reviewer was never asked for the second factor');
              await page.waitForURL((url) => url.hostname === appDomain && url.pathname === review);
              await polls('the status "Sie prüfen dieses Objekt"', () => page.getByRole('status').filter({ hasText: 'Sie prüfen dieses Objekt' }).count());
              await page.getByRole('button', { name: 'Freigeben' }).click();
              await polls('the status "Freigegeben."', () => page.getByRole('status').filter({ hasText: 'Freigegeben.' }).count());
              const reviews = await viaProxy(stack, https(domains.api!, `/api/features/${encodeURIComponent(drawnId)}/reviews`), { headers: { authorization: `Bearer ${signedIn.get('contributor')?.accessToken ?? ''}` } });
              const status = reviews.status === 200 ? (JSON.parse(reviews.body) as { status?: string }).status : `(reviews answered ${reviews.status})`;
              assert(status === 'approved', `the desk said Freigegeben, the API says ${status}`);
              approvedOnDesk = true;
              return `step-up to aal2 through the login app at ${steppedUp}, approved on /qc/${drawnId}; the API says approved`;
            } finally {
              await closeContext(reviewer.context);
            }
          }));
        }
        if (approvedOnDesk) {
          await stepOf("6f5 the desk's approval leaves the platform as the API's does: the reviewers' mail and the agency notice name the drawn feature, and anonymous WFS and WMS show it only now", async () => {
            const { mail, reviewers, agency } = ctx.outside;
            const worker = () => `qc-worker: ${(stack.containers.get('qc-worker')?.log ?? []).slice(-4).map((l) => l.slice(0, 300)).join(' | ')}`;
            await until(`the reviewers' mail naming ${drawnId}`, async () => (mail.messages.some((m) => m.envelope.to.includes(reviewers) && m.raw.includes(drawnId)) ? true : undefined), 60_000).catch((error: Error) => {
              throw new Error(`${error.message}; ${worker()}`);
            });
            await until(`the agency notice naming ${drawnId}`, async () => (agency.some((n) => n.body.includes(drawnId)) ? true : undefined), 60_000).catch((error: Error) => {
              throw new Error(`${error.message}; ${worker()}`);
            });
            assert(beforeDesk, 'no anonymous view from before the approval (step 6f3)');
            doing('anonymous WFS and WMS after the approval on the desk');
            const after = await anonymousView(stack, domains.geo!, drawnPlace);
            assert(!beforeDesk.ids.includes(drawnId), `before the desk's approval anonymous WFS listed ${drawnId}`);
            assert(after.ids.includes(drawnId), `after the desk's approval anonymous WFS has ${after.ids.length} features, not ${drawnId}`);
            assert(beforeDesk.drawn >= 0 && after.drawn === beforeDesk.drawn + 1, `anonymous WMS drew ${beforeDesk.drawn} shapes at the polygon's middle before the approval and ${after.drawn} after, not one more`);
            return `the reviewers' mail and the agency notice name ${drawnId}; anonymous WFS lists it (not before), WMS draws ${after.drawn} shapes there (${beforeDesk.drawn} before)`;
          });
        }
      } finally {
        // Outside any step, so bounded here: a context that never closes must not hang the rehearsal.
        if (contributor) await Promise.race([contributor.context.close(), new Promise((r) => setTimeout(r, 15_000).unref())]);
      }
    };

    // 1 ------------------------------------------------------------------------------------------
    await stepOf('1a a person registers through the accounts domain', async () => {
      const context = await browser!.newContext(CONTEXT);
      try {
        const page = await context.newPage();
        const person = { email: 'nora@example.org', name: 'Nora Newcomer', password: `pw-${randomBytes(9).toString('base64url')}` };
        const failure = await page.goto(https(domains.accounts!, '/registration')).then(
          (response) => (response && response.status() < 400 ? undefined : `answers ${response?.status() ?? 0}`),
          (error: Error) => error.message.split('\n')[0]!.replace(/^page\.goto: /, ''),
        );
        if (failure) {
          throw new Error(
            `${domains.accounts}/registration ${failure}: the accounts domain is the Kratos self-service UI image, which has no stand-in here, and the Kratos double has no registration flow`,
          );
        }
        await page.getByLabel('E-Mail').fill(person.email);
        await page.getByLabel('Password').fill(person.password);
        await page.getByLabel('Name').fill(person.name);
        await page.getByRole('button', { name: 'Sign up' }).click();
        await page.waitForLoadState('networkidle');
        const registered = [...(kratos?.identities.values() ?? [])].some((i) => i.email === person.email);
        assert(registered, `no identity ${person.email} in Kratos after the registration form was sent`);
        return `${person.email} registered`;
      } finally {
        await closeContext(context);
      }
    });
    // The people exist in Kratos from here on (as if registered), with their role in metadata_public.
    for (const person of Object.values(people)) kratos?.addIdentity(person);
    let journeyBegan = 0;
    await stepOf('1b signs in through the login app and completes the OAuth2 code flow of the synced client', async () => {
      journeyBegan = Date.now();
      const me = await signIn('contributor');
      assert(hydra!.tokens.has(me.accessToken), 'the access token is not one Hydra issued');
      assert(!/^ey[\w-]+\.ey/.test(me.accessToken), 'a JWT access token, but hydra.yml issues opaque ones');
      return `client map-editor, opaque access token (${me.accessToken.length} chars), session cookie on .${ctx.parentDomain}`;
    });

    // 2 ------------------------------------------------------------------------------------------
    let featureId = '';
    await stepOf('2 the access token calls the API through the proxy with the role from Kratos metadata_public', async () => {
      const me = signedIn.get('contributor');
      assert(me, 'no sign-in (step 1b failed)');
      const created = await viaProxy(stack, https(domains.api!, '/api/features'), {
        method: 'POST',
        headers: { authorization: `Bearer ${me.accessToken}`, 'content-type': 'application/json' },
        body: JSON.stringify({ type: 'Feature', geometry: { type: 'Point', coordinates: [13.4, 52.5] }, properties: { name: 'Alter Friedhof', kategorie: 'friedhof' } }),
      });
      assert(created.status === 201, `POST /api/features answered ${created.status}: ${created.body.slice(0, 300)}`);
      featureId = (JSON.parse(created.body) as { id: string }).id;
      // A role the API took from anywhere else would let a guest create too: one without a role may not.
      const guest = kratos!.addIdentity({ email: 'gus@example.org', name: 'Gus Guest', password: 'pw-guest-rehearsal' });
      const guestSession = kratos!.createSession(guest.id);
      const denied = await viaProxy(stack, https(domains.api!, '/api/features'), {
        method: 'POST',
        headers: { cookie: `ory_kratos_session=${guestSession.token}`, 'content-type': 'application/json', origin: https(domains.api!).replace(/\/$/, '') },
        body: JSON.stringify({ type: 'Feature', geometry: { type: 'Point', coordinates: [13.4, 52.5] }, properties: { name: 'x', kategorie: 'friedhof' } }),
      });
      assert(denied.status === 403, `a person without a role got ${denied.status} on create`);
      return `contributor created feature ${featureId} (201); a person without a role gets 403`;
    });

    // 3 ------------------------------------------------------------------------------------------
    await stepOf('3 the session cookie from the login on another subdomain calls the API (single sign-on)', async () => {
      const me = signedIn.get('contributor');
      assert(me && featureId, 'no sign-in or no feature (steps 1b/2 failed)');
      const page = await me.context.newPage();
      const response = await page.goto(https(domains.api!, `/api/features/${featureId}`));
      const status = response?.status() ?? 0;
      const body = (await response?.text()) ?? '';
      await page.close();
      assert(status === 200, `GET /api/features/${featureId} in the signed-in browser answered ${status}: ${body.slice(0, 200)}`);
      return `the browser's ory_kratos_session (set by ${domains.kratos}) reads the feature on ${domains.api}`;
    });

    // What an anonymous reader of GeoServer gets before the journey's feature is approved (step 5c).
    const beforeApproval = await anonymousView(stack, domains.geo!, JOURNEY_POINT).catch((error: Error) => error);

    // 4 ------------------------------------------------------------------------------------------
    await stepOf('4 a feature is created, submitted, and approved by a second user', async () => {
      const me = signedIn.get('contributor');
      assert(me && featureId, 'no feature (step 2 failed)');
      const submitted = await viaProxy(stack, https(domains.api!, '/api/qc/submit'), {
        method: 'POST',
        headers: { authorization: `Bearer ${me.accessToken}`, 'content-type': 'application/json' },
        body: JSON.stringify({ featureId }),
      });
      assert(submitted.status === 200, `submit answered ${submitted.status}: ${submitted.body.slice(0, 200)}`);
      const reviewer = await signIn('reviewer');
      const approved = await viaProxy(stack, https(domains.api!, `/api/qc/approve/${featureId}`), { method: 'POST', headers: { authorization: `Bearer ${reviewer.accessToken}` } });
      assert(approved.status === 200, `approve answered ${approved.status}: ${approved.body.slice(0, 200)}`);
      const feature = await viaProxy(stack, https(domains.api!, `/api/features/${featureId}`), { headers: { authorization: `Bearer ${reviewer.accessToken}` } });
      return `approved by the reviewer; the feature reads ${feature.body.match(/"status":"\w+"/)?.[0] ?? `(status ${feature.status})`}`;
    });

    // 5 ------------------------------------------------------------------------------------------
    await stepOf("4b the approval leaves the platform through the QC worker's own way out: the reviewers' mail reaches the mail relay, the notice reaches the agency", async () => {
      assert(featureId, 'no feature (step 2 failed)');
      const { mail, reviewers, agency } = ctx.outside;
      // The worker says when it cannot reach the relay at all: no need to wait the minute out.
      const unreachable = /SMTP delivery failed: connect (?:ECONNREFUSED|EHOSTUNREACH|ENETUNREACH|ETIMEDOUT)/;
      // Only what it logs from now on: a refusal from before this step (a relay starting late) decides nothing.
      const logged = stack.containers.get('qc-worker')?.log.length ?? 0;
      const refused = () => (stack.containers.get('qc-worker')?.log ?? []).slice(logged).some((line) => unreachable.test(line.slice(0, 4000)));
      await until(
        `the reviewers' mail for ${featureId} at the mail relay`,
        async () => {
          if (mail.messages.some((m) => m.envelope.to.includes(reviewers) && m.raw.includes(featureId))) return true;
          if (refused()) throw new GaveUp('the QC worker cannot reach the mail relay');
          return undefined;
        },
        60_000,
      ).catch(() => {
        const worker = stack.containers.get('qc-worker');
        throw new Error(`no mail to ${reviewers} naming ${featureId} (${mail.messages.length} messages); qc-worker: ${worker?.status ?? 'not started'} | ${(worker?.log ?? []).slice(-4).join(' | ')}`);
      });
      await until(`the agency notice for ${featureId}`, async () => (agency.some((n) => n.body.includes(featureId)) ? true : undefined), 60_000).catch(() => {
        const worker = stack.containers.get('qc-worker');
        throw new Error(`no agency notice naming ${featureId} (${agency.length} received); qc-worker: ${worker?.status ?? 'not started'} | ${(worker?.log ?? []).slice(-4).join(' | ')}`);
      });
      // The way out is the worker's alone: the API, on internal networks only, could not have sent them.
      const out = stack.endpoints.references.filter((r) => /^(mail-relay|agency-endpoint):/.test(r.to));
      assert(out.length > 0 && out.every((r) => r.from === 'qc-worker' && r.reachable), `references to the outside: ${out.map((r) => `${r.from}→${r.to} ${r.reachable ? 'reachable' : 'unreachable'}`).join(', ') || 'none'}`);
      return `the reviewers' mail (to ${reviewers}) and the agency notice for ${featureId} arrived outside, sent by qc-worker over worker-out`;
    });

    await stepOf("4c the approval's exports reach OSM and Wikibase over the QC worker's way out: the reviewer confirms each OSM plan, the changeset and the item arrive, the item's id goes back to OSM", async () => {
      assert(featureId, 'no feature (step 2 failed)');
      const reviewer = signedIn.get('reviewer');
      assert(reviewer, 'no signed-in reviewer (step 4 failed)');
      const { osm, wiki } = ctx.outside;
      const asReviewer = (path: string, body?: unknown) =>
        viaProxy(stack, https(domains.api!, path), {
          method: body === undefined ? 'GET' : 'POST',
          headers: { authorization: `Bearer ${reviewer.accessToken}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
          ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        });
      const jobsOfFeature = async (): Promise<JobView[]> => {
        const reviews = await asReviewer(`/api/features/${featureId}/reviews`);
        assert(reviews.status === 200, `GET /api/features/${featureId}/reviews answered ${reviews.status}: ${reviews.body.slice(0, 200)}`);
        return (JSON.parse(reviews.body) as { jobs: JobView[] }).jobs;
      };
      // The worker's lines about these exports (its mail and agency lines are step 4b's).
      const workerLog = () =>
        (stack.containers.get('qc-worker')?.log ?? [])
          .filter((line) => /"task":"(osm|wikibase)_export"|OSM API|Wikibase/.test(line.slice(0, 4000)))
          .slice(-3)
          .map((line) => line.slice(0, 600))
          .join(' | ') || '(nothing about OSM or Wikibase)';
      /** Stops the wait at once when an export cannot reach its remote side at all. */
      const giveUpWhenCutOff = async () => {
        const stuck = (await jobsOfFeature()).find((j) => /^(osm|wikibase)_export$/.test(j.task) && j.status === 'retrying' && CUT_OFF.test(j.lastError ?? ''));
        if (stuck) throw new GaveUp(`${stuck.task} cannot reach its remote side (${stuck.lastError?.slice(0, 160)}); qc-worker: ${workerLog()}`);
      };
      /** What a reviewer does on the desk (/qc/decisions): read the plan waiting for this feature and confirm it as proposed. */
      const confirmed = new Set<number>();
      const confirmPlan = async (what: string): Promise<PlannedJob> => {
        const job = await until(
          what,
          async () => {
            const listed = await asReviewer('/api/qc/jobs?status=needs_decision');
            assert(listed.status === 200, `GET /api/qc/jobs?status=needs_decision answered ${listed.status}: ${listed.body.slice(0, 200)}`);
            const waiting = (JSON.parse(listed.body) as { jobs: PlannedJob[] }).jobs.find((j) => j.featureId === featureId && j.task === 'osm_export' && j.plan && !confirmed.has(j.id));
            if (waiting) return waiting;
            await giveUpWhenCutOff();
            return undefined;
          },
          60_000,
        ).catch((error: Error) => {
          throw error instanceof GaveUp ? error : new Error(`${error.message}; qc-worker: ${workerLog()}`);
        });
        const decided = await asReviewer(`/api/qc/jobs/${job.id}/decision`, { choice: job.plan!.proposed });
        assert(decided.status === 200, `confirming the plan of job ${job.id} answered ${decided.status}: ${decided.body.slice(0, 200)}`);
        confirmed.add(job.id);
        return job;
      };
      const outcome = (task: string, what: string, accept: (job: JobView) => boolean) =>
        until(
          what,
          async () => {
            const jobs = await jobsOfFeature();
            const done = jobs.find((j) => j.task === task && accept(j));
            if (done) return done;
            const failed = jobs.find((j) => j.task === task && ['failed', 'conflict', 'skipped'].includes(j.status));
            if (failed) throw new GaveUp(`${task} ended ${failed.status}: ${failed.reason ?? ''}`);
            await giveUpWhenCutOff();
            return undefined;
          },
          60_000,
        ).catch((error: Error) => {
          throw error instanceof GaveUp ? error : new Error(`${error.message}; qc-worker: ${workerLog()}`);
        });

      // The first plan: create the node of the approved point; nothing is uploaded before the reviewer confirms it.
      const first = await confirmPlan('the OSM plan of the approval on the desk');
      assert(osm.acceptedUploads.length === 0, `${osm.acceptedUploads.length} uploads reached OSM before the reviewer confirmed the plan`);
      const exported = await outcome('osm_export', 'the OSM export of the confirmed plan', (j) => j.id === first.id && j.status === 'exported');
      const element = exported.result as { type: 'node' | 'way' | 'relation'; id: number; changesetId?: number };
      const upload = osm.requests.find((r) => r.method === 'POST' && r.path === `/api/0.6/changeset/${element.changesetId}/upload`);
      assert(upload && osm.element(element.type, element.id), `the export reports ${element.type} ${element.id} in changeset ${element.changesetId}, which OSM does not hold`);
      ctx.figures['journey: sign-in to the export reaching OSM'] = `${((upload.at - journeyBegan) / 1000).toFixed(1)} s`;
      // Wikibase follows the OSM export of the same approval, and creates the item as the worker's bot account.
      const item = await outcome('wikibase_export', 'the Wikibase export', (j) => j.status === 'exported');
      const itemId = String(item.result?.itemId ?? '');
      assert(wiki.createdItems().some((i) => i.id === itemId), `the Wikibase export reports item ${itemId}, which the wiki did not create`);
      // The item goes back to OSM (wikidata=) as a second reviewed plan of one tag change.
      const linkBack = await confirmPlan("the OSM plan that writes the item's id back");
      assert(linkBack.plan!.tagChanges.some((c) => c.key === 'wikidata' && c.after === itemId), `the second plan changes ${JSON.stringify(linkBack.plan!.tagChanges)}, not wikidata=${itemId}`);
      await until(`wikidata=${itemId} on ${element.type} ${element.id}`, async () => (osm.element(element.type, element.id)?.tags.wikidata === itemId ? true : undefined), 60_000).catch(async (error: Error) => {
        await giveUpWhenCutOff();
        throw error;
      });
      // Only the worker went out, over its own network.
      const out = stack.endpoints.references.filter((r) => /^(osm-api|wikibase):/.test(r.to));
      assert(out.length > 0 && out.every((r) => r.from === 'qc-worker' && r.reachable), `references to OSM and Wikibase: ${out.map((r) => `${r.from}→${r.to} ${r.reachable ? 'reachable' : 'unreachable'}`).join(', ') || 'none'}`);
      return `the reviewer confirmed the plan (${first.plan!.action}), ${element.type} ${element.id} uploaded in changeset ${element.changesetId} ${((upload.at - journeyBegan) / 1000).toFixed(1)} s after sign-in; item ${itemId} created; the second plan (wikidata=${itemId}) confirmed and on OSM; only qc-worker reached them`;
    });

    await stepOf('5 GeoServer provisioning ran against the GeoServer double', async () => {
      const job = stack.containers.get('geoserver-provision');
      assert(job?.exitCode === 0, `geoserver-provision: ${job ? `exit ${job.exitCode}` : 'never started'}`);
      const geoserver = stack.geoserver!;
      assert(geoserver.violations.length === 0, `requests off the GeoServer REST contract: ${geoserver.violations.join('; ')}`);
      const state = geoserver.state;
      assert(state.workspaces.size > 0 && state.datastores.size > 0 && state.featureTypes.size > 0, `nothing provisioned: ${JSON.stringify({ w: [...state.workspaces], d: [...state.datastores.keys()] })}`);
      return `${job.log.filter((l) => l.startsWith('geoserver:')).length} changes (${[...state.workspaces].join(', ')}; ${[...state.featureTypes.keys()].join(', ')})`;
    });

    // 5b -----------------------------------------------------------------------------------------
    await stepOf('5b a WFS-T insert through the proxy as a signed-in contributor is recorded under that user; anonymous WFS-T gets 401', async () => {
      const me = signedIn.get('contributor');
      assert(me && featureId, 'no signed-in contributor or no feature (steps 1b/2 failed)');
      const name = `wfs-t-${randomBytes(4).toString('hex')}`;
      const transaction = `<wfs:Transaction service="WFS" version="1.1.0" xmlns:wfs="http://www.opengis.net/wfs" xmlns:gml="http://www.opengis.net/gml" xmlns:geodata="https://${domains.geo!}/features"><wfs:Insert><geodata:features><geodata:name>${name}</geodata:name><geodata:kategorie>blumenbeet</geodata:kategorie><geodata:geom><gml:Point srsName="EPSG:4326"><gml:pos>13.41 52.52</gml:pos></gml:Point></geodata:geom></geodata:features></wfs:Insert></wfs:Transaction>`;
      const wfs = https(domains.geo!, '/geoserver/wfs');
      // Forged identity headers must not help an anonymous caller: the proxy removes them.
      const anonymous = await viaProxy(stack, wfs, { method: 'POST', headers: { 'content-type': 'text/xml', 'x-geodata-user': 'u_00000000000000000000000000000001', 'x-geodata-role': 'ROLE_ADMIN' }, body: transaction });
      assert(anonymous.status === 401, `anonymous WFS-T answered ${anonymous.status}: ${anonymous.body.slice(0, 200)}`);
      const inserted = await viaProxy(stack, wfs, { method: 'POST', headers: { 'content-type': 'text/xml', cookie: me.sessionCookie }, body: transaction });
      assert(inserted.status === 200 && inserted.body.includes('<wfs:totalInserted>1</wfs:totalInserted>'), `WFS-T as the contributor answered ${inserted.status}: ${inserted.body.slice(0, 300)}`);
      const features = stack.clusters.get('features-db')!;
      const contributorId = features.psql('features', `SELECT created_by FROM features.features WHERE id = '${featureId.replace(/'/g, "''")}'`).trim();
      const actors = features.psql('features', `SELECT string_agg(h.actor, ',') FROM history.feature_versions h JOIN features.features f ON f.id = h.feature_id WHERE f.name = '${name}'`).trim();
      assert(actors === contributorId, `the history names ${actors || 'nobody'} for the WFS-T insert, not the contributor ${contributorId}`);
      return `anonymous 401; the contributor's insert is in the history under ${contributorId} (not the role geoserver)`;
    });

    // 5c -----------------------------------------------------------------------------------------
    await stepOf("5c anonymous WFS and WMS through the proxy's public GeoServer route show the journey's feature only once approved; the editors' layer stays hidden", async () => {
      assert(featureId, 'no feature (step 2 failed)');
      if (beforeApproval instanceof Error) throw new Error(`before the approval: ${beforeApproval.message}`);
      const after = await anonymousView(stack, domains.geo!, JOURNEY_POINT);
      const geoserverLog = () => stack.geoserver?.requests.filter((r) => r.method === 'GET').slice(-4).map((r) => `${r.status} ${r.path}${r.query.slice(0, 80)}`).join(' | ') ?? '';
      for (const [when, view] of [['before the approval', beforeApproval], ['after the approval', after]] as const) {
        assert(view.wfsStatus === 200 && view.wmsStatus === 200, `${when}: anonymous GetFeature answered ${view.wfsStatus}, GetMap ${view.wmsStatus} (${view.problem}); geoserver: ${geoserverLog()}`);
        assert(view.editorsHidden, `${when}: the editors' layer ${view.editorsLayer} answered an anonymous GetFeature: ${view.problem}`);
      }
      assert(!beforeApproval.ids.includes(featureId) && beforeApproval.drawn === 0, `before the approval an anonymous reader got the feature: WFS ids ${beforeApproval.ids.join(', ') || 'none'}, ${beforeApproval.drawn} drawn by WMS`);
      assert(after.ids.includes(featureId), `after the approval anonymous WFS has ${after.ids.length} features, not ${featureId}`);
      assert(after.drawn === 1, `after the approval anonymous WMS draws ${after.drawn} features at the feature's place, not 1`);
      // The WFS-T insert of step 5b is a draft: never public.
      const features = stack.clusters.get('features-db')!;
      const drafts = features.psql('features', "SELECT string_agg(id::text, ',') FROM features.features WHERE status <> 'approved'").trim().split(',').filter(Boolean);
      const leaked = drafts.filter((id) => after.ids.includes(id));
      assert(drafts.length > 0 && leaked.length === 0, leaked.length ? `drafts ${leaked.join(', ')} are in the anonymous WFS` : 'no draft feature to check against (step 5b inserted none)');
      return `${after.layer}: WFS without it before (${beforeApproval.ids.length} features), with it after (${after.ids.length}); WMS drew ${beforeApproval.drawn} then ${after.drawn} at its place; ${drafts.length} drafts never shown; ${after.editorsLayer} hidden from anonymous readers`;
    });

    // 6 ------------------------------------------------------------------------------------------
    await stepOf("6 a signed push reaches the webhook through the proxy; the target's builder builds it and the target's own site container serves it", async () => {
      const marker = `rehearsal-${randomBytes(4).toString('hex')}`;
      const git = gitIn(ctx.fixtureRepo);
      git('checkout', '--quiet', '-B', ctx.pushTarget.branch);
      execFileSync('sh', ['-c', `printf '%s\\n' '${marker}' > VERSION`], { cwd: ctx.fixtureRepo });
      git('commit', '--quiet', '-am', marker);
      const after = git('rev-parse', 'HEAD');
      await signedPush(stack, domains.webhook!, ctx.pushTarget, ctx.pushTarget.branch, after);
      await until(
        `${ctx.pushTarget.domain} serving ${marker}`,
        async () => {
          const live = await viaProxy(stack, https(ctx.pushTarget.domain, '/'));
          return live.status === 200 && live.body.includes(marker) ? true : undefined;
        },
        180_000,
      ).catch((error: Error) => {
        const webhookLog = stack.containers.get('webhook')?.log.slice(-6).join(' | ');
        const builderLog = stack.containers.get(`builder-${ctx.pushTarget.deployPath}`)?.log.slice(-6).join(' | ');
        throw new Error(`${error.message}; webhook log: ${webhookLog}; builder log: ${builderLog}`);
      });
      // The site container's processes run as its declared uid, in a network namespace of its own.
      const site = stack.containers.get(`site-${ctx.pushTarget.deployPath}`);
      assert(site?.pid !== undefined && site.ownNetns, `site-${ctx.pushTarget.deployPath} was not started in a network namespace of its own`);
      const uid = /^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${site.pid}/status`, 'utf8'))?.[1];
      assert(site.runAs && uid === String(site.runAs.uid), `site-${ctx.pushTarget.deployPath} runs as uid ${uid ?? '?'}, not its declared ${site.runAs?.uid ?? '(none)'}`);
      return `push of ${after.slice(0, 8)} to ${ctx.pushTarget.branch}: 202, built by builder-${ctx.pushTarget.deployPath}, ${ctx.pushTarget.domain} serves it from site-${ctx.pushTarget.deployPath} (uid ${uid}, own network namespace) through the proxy`;
    });

    if (ctx.webApp && webAppDeploy) {
      const app = ctx.webApp;
      const live = await stepOf("6e the platform's web app for main: a push builds services/web in the target's builder (npm ci from the target's npm cache, astro build), the target's site serves it, and its map loads the approved feature from the API through the proxy", async () => {
        assert(featureId, 'no feature (step 2 failed)');
        // The push went out when the stack was up (startWebAppDeploy); the build ran beside steps 1-6.
        doing(`the deploy of the web app to ${app.target.domain} (pushed when the stack was up)`);
        const { after, deployedS, seedS, home } = await webAppDeploy;
        ctx.figures['web app: push to live on main'] = `${deployedS} s (npm cache seeded in ${seedS} s; built beside steps 1-6)`;
        // The category descriptions the operator put into the target's content collection are on the map page.
        const description = readFileSync(join(app.repo, 'services/web/src/content/kategorien/de/blumenbeet.md'), 'utf8').replace(/^---[\s\S]*?---/, '').trim();
        assert(description && home.includes(description), `${app.target.domain}/ does not show the category description from the target's shared/src/content ("${description}")`);
        // An anonymous visitor's map at the feature: the browser asks the API through the proxy.
        doing('a new browser context');
        const context = await browser!.newContext(CONTEXT);
        try {
          const page = await context.newPage();
          const api = `https://${domains.api!}/api/`;
          doing(`the map of ${app.target.domain} loading ${featureId} from ${domains.api}`);
          const listed = page.waitForResponse(async (r) => r.url().startsWith(api) && r.status() === 200 && (await r.text()).includes(featureId), { timeout: 60_000 });
          await page.goto(https(app.target.domain, `/?center=${JOURNEY_POINT.lon},${JOURNEY_POINT.lat}&zoom=17`));
          const response = await listed.catch(() => undefined);
          assert(response, `the map of ${app.target.domain} loaded nothing from ${domains.api} that names ${featureId}; site-${app.target.deployPath}: ${stack.containers.get(`site-${app.target.deployPath}`)?.log.slice(-3).join(' | ')}`);
          return `pushed ${after.slice(0, 8)} to ${app.target.key}: live after ${deployedS} s, its map page shows the operator's category descriptions; the map at the feature loaded it from ${new URL(response.url()).pathname} through the proxy`;
        } finally {
          await closeContext(context);
        }
      });
      // 6f: each part has its own deadline (stepSettings), so a browser action that never returns fails it.
      if (live) await webAppDay(app.target.domain);
    }

    await stepOf("6d each site is told what its target may know: the platform's sites where the API and sign-in are, a preview site the API only", async () => {
      const environ = (pid: number): Record<string, string> =>
        Object.fromEntries(
          readFileSync(`/proc/${pid}/environ`, 'utf8')
            .split('\0')
            .filter((e) => e.includes('='))
            .map((e) => [e.slice(0, e.indexOf('=')), e.slice(e.indexOf('=') + 1)]),
        );
      /** The site process a container's supervisor runs: the descendant that was given PORT. */
      const siteProcess = (containerPid: number): number | undefined => {
        const queue = [containerPid];
        for (let seen = 0; queue.length > 0 && seen < 200; seen++) {
          const pid = queue.shift()!;
          if (pid !== containerPid && environ(pid).PORT) return pid;
          queue.push(...execFileSync('ps', ['-o', 'pid=', '--ppid', String(pid)], { encoding: 'utf8' }).split('\n').map((l) => Number(l.trim())).filter((n) => n > 0));
        }
        return undefined;
      };
      const preview = stack.containers.get(`site-${ctx.pushTarget.deployPath}`);
      assert(preview?.pid !== undefined, `site-${ctx.pushTarget.deployPath} is not running`);
      const previewSite = siteProcess(preview.pid);
      assert(previewSite, `no site process under site-${ctx.pushTarget.deployPath} (step 6 deployed none?)`);
      const seen = environ(previewSite);
      assert(seen.API_PUBLIC_URL === `https://${domains.api!}`, `the preview site's process has API_PUBLIC_URL=${seen.API_PUBLIC_URL ?? '(unset)'}`);
      const leaked = ['KRATOS_PUBLIC_URL', 'LOGIN_URL'].filter((k) => k in seen);
      assert(leaked.length === 0, `the preview site's process was told ${leaked.join(', ')}`);
      // The platform's site (main): its container's process holds the settings it passes on to the site.
      const main = [...stack.containers.values()].find((c) => c.name === 'site-main');
      assert(main?.pid !== undefined, 'site-main is not running');
      const declared = environ(main.pid);
      for (const [name, value] of [['SITE_ENV_API_PUBLIC_URL', `https://${domains.api!}`], ['SITE_ENV_KRATOS_PUBLIC_URL', `https://${domains.kratos!}`], ['SITE_ENV_LOGIN_URL', https(domains.kratos!, '/self-service/login/browser')]] as const) {
        assert(declared[name] === value, `site-main's process has ${name}=${declared[name] ?? '(unset)'}, not ${value}`);
      }
      return `the preview site's process sees API_PUBLIC_URL=${seen.API_PUBLIC_URL} and no sign-in setting; site-main passes on the API, Kratos and its login`;
    });

    await stepOf('6b the branch site (code from team pushes) never receives the session cookie', async () => {
      const me = signedIn.get('contributor');
      assert(me, 'no signed-in browser (step 1b failed)');
      // The Cookie header the signed-in browser really sends, to the API (it must: the check would be
      // empty otherwise) and to the branch site (it must not: a site under the cookie domain gets every session).
      const cookieSentTo = async (url: string): Promise<string> => {
        const page = await me.context.newPage();
        try {
          let header = '';
          page.on('request', (request) => {
            if (request.url().startsWith(url)) void request.allHeaders().then((h) => (header ||= h.cookie ?? ''));
          });
          await page.goto(url);
          await page.waitForTimeout(100);
          return header;
        } finally {
          await page.close();
        }
      };
      const toApi = await cookieSentTo(https(domains.api!, '/api/me'));
      assert(/(^|; )ory_kratos_session=/.test(toApi), `the signed-in browser sends no session to ${domains.api} either (cookies: ${toApi.replace(/=[^;]*/g, '=…') || 'none'}): this check would prove nothing`);
      const toSite = await cookieSentTo(https(ctx.pushTarget.domain, '/'));
      assert(!/(^|; )ory_kratos_session=/.test(toSite), `the browser sends ory_kratos_session to ${ctx.pushTarget.domain} (cookie domain .${ctx.parentDomain})`);
      return `the signed-in browser sends its session to ${domains.api} and ${toSite ? `only ${toSite.replace(/=[^;]*/g, '')}` : 'no cookie'} to ${ctx.pushTarget.domain}`;
    });

    await stepOf("6c a site's code cannot take another target's port or the webhook's: it binds them in its own namespace and receives nothing", async () => {
      const squatterSite = stack.containers.get(`site-${ctx.otherTarget.deployPath}`);
      assert(squatterSite?.pid !== undefined && squatterSite.ownNetns, `site-${ctx.otherTarget.deployPath} was not started in a network namespace of its own`);
      const file = join(stack.scratch, 'squatter.mjs');
      writeFileSync(file, SQUATTER);
      const squat = [
        { name: ctx.pushTarget.key, port: ctx.pushTarget.port },
        { name: 'webhook', port: ctx.webhookPort },
      ];
      const squatter = spawnInNetnsOf(squatterSite.pid, process.execPath, [file], {
        env: { PATH: process.env.PATH ?? '', SQUAT: JSON.stringify(squat) },
        stdio: ['ignore', 'pipe', 'ignore'],
        ...(squatterSite.runAs ? { user: squatterSite.runAs } : {}),
      });
      let output = '';
      squatter.stdout!.on('data', (c: Buffer) => (output += c.toString()));
      try {
        await until('the squatter holds both ports', async () => (squat.every((p) => output.includes(`bound ${p.name}`)) ? true : undefined), 10_000);
        for (let i = 0; i < 3; i++) {
          const site = await viaProxy(stack, https(ctx.pushTarget.domain, '/'));
          assert(site.status === 200 && !site.body.includes('squatter'), `${ctx.pushTarget.domain} answered ${site.status}: ${site.body.slice(0, 80)}`);
          const hook = await viaProxy(stack, https(domains.webhook!, '/health'));
          assert(hook.status === 200 && !hook.body.includes('squatter'), `the webhook domain answered ${hook.status}: ${hook.body.slice(0, 80)}`);
        }
        assert(!output.includes('connection'), `the squatter received: ${output.trim()}`);
      } finally {
        squatter.kill('SIGKILL');
      }
      return `site-${ctx.otherTarget.deployPath}'s code bound ${squat.map((p) => p.port).join(' and ')} in its own namespace; ${ctx.pushTarget.domain} and the webhook were answered by themselves, the squatter got no connection`;
    });

    // 7 ------------------------------------------------------------------------------------------
    await stepOf('7 the backup job writes a dump that restores into an empty cluster', async () => {
      const backup = stack.containers.get('backup');
      assert(backup?.status === 'healthy', `backup: ${backup?.status ?? 'never started'} ${backup?.detail ?? ''}`);
      const volume = join(stack.scratch, 'volumes');
      const dir = readdirSync(volume).map((v) => join(volume, v, 'features')).find((d) => existsSync(d));
      assert(dir, 'no features/ folder in any volume: the backup wrote nothing');
      const dumpsNow = () => readdirSync(dir).filter((f) => f.endsWith('.dump')).sort();
      // The first round ran when the container started, which the stack orders after the migrations:
      // that dump already holds the schema (infra/stack/backups.ts).
      const first = dumpsNow()[0];
      assert(first, 'the backup started but wrote no first dump');
      const firstContents = execFileSync(join(process.env.PG_BIN ?? '/usr/lib/postgresql/15/bin', 'pg_restore'), ['--list', join(dir, first)], { encoding: 'utf8' });
      assert(/TABLE DATA metadata schema_migrations/.test(firstContents), `the first dump ${first} was taken before the API's migrations (no metadata.schema_migrations data)`);
      // `docker restart` runs a round at once: that dump holds the features created in step 4.
      const before = dumpsNow().length;
      await new Promise((r) => setTimeout(r, 1100)); // dump names carry the second
      await stack.restart.get('backup')!();
      await until('a new features dump', async () => (dumpsNow().length > before ? true : undefined), 60_000);
      const dumps = dumpsNow();
      const port = await freePort();
      const empty = startCluster({ port, superuser: 'postgres', password: randomBytes(12).toString('hex'), database: 'restored', postgis: false });
      try {
        // The dump's objects are owned by the features role; an empty cluster has it too once the roles job ran.
        empty.psql('postgres', 'CREATE ROLE features; CREATE ROLE geoserver');
        execFileSync(join(process.env.PG_BIN ?? '/usr/lib/postgresql/15/bin', 'pg_restore'), ['-h', empty.dir, '-p', String(port), '-U', 'postgres', '-d', 'restored', '--exit-on-error', join(dir, dumps.at(-1)!)], {
          encoding: 'utf8',
          stdio: ['ignore', 'pipe', 'pipe'],
        });
        const query = 'SELECT (SELECT count(*) FROM metadata.schema_migrations) || \' migrations, \' || (SELECT count(*) FROM features.features) || \' features\'';
        const source = stack.clusters.get('features-db')!.psql('features', query).trim();
        const restored = empty.psql('restored', query).trim();
        assert(!source.startsWith('0 ') && restored === source, `restored ${restored}, the live database has ${source}`);
        // The journey's own feature (steps 2-4), approved: a dump of an empty platform would pass the counts.
        assert(/^[0-9A-Za-z-]{1,64}$/.test(featureId), 'no feature from the journey to look for (step 2 failed)');
        const journey = empty.psql('restored', `SELECT f.status FROM features.features f WHERE f.id::text = '${featureId}'`).trim();
        assert(journey === 'approved', `the journey's feature ${featureId} is ${journey ? `'${journey}'` : 'missing'} in the restored dump`);
        return `${dumps.at(-1)} restored into an empty cluster: ${restored}, as in the live database; the journey's feature ${featureId} is there, approved`;
      } finally {
        empty.stop();
      }
    });

    // 8 ------------------------------------------------------------------------------------------
    /** The web app's editor page in the contributor's browser (8 and 8b, `--web-app`): its status and whether it offers to sign out. */
    const appEditorAs = async (context: BrowserContext) => {
      const page = await context.newPage();
      try {
        doing(`${ctx.webApp!.target.domain}/features/new in the contributor's browser`);
        const response = await page.goto(https(ctx.webApp!.target.domain, '/features/new'));
        return { status: response?.status() ?? 0, path: new URL(page.url()).pathname, signOut: await page.locator('a[href="/logout"]').count() };
      } finally {
        doing('the editor page to close');
        await page.close();
      }
    };
    let appBeforeSignOut: Awaited<ReturnType<typeof appEditorAs>> | Error | undefined;
    let signedOutEverywhere = false;
    await stepOf('8 the contributor signs out everywhere: Hydra and Kratos end their sessions, the token and the cookie no longer sign anyone in', async () => {
      const me = signedIn.get('contributor');
      assert(me, 'no signed-in contributor (step 1b failed)');
      const whoami = (cookie: string) => viaProxy(stack, https(domains.kratos!, '/sessions/whoami'), { headers: { cookie, accept: 'application/json' } });
      assert((await whoami(me.sessionCookie)).status === 200, 'the session cookie was not valid before signing out: the step would prove nothing');
      // With the web app: what it shows the contributor's browser before signing out (step 8b compares).
      if (ctx.webApp) appBeforeSignOut = await appEditorAs(me.context).catch((error: Error) => error);
      doing('a new page in the contributor\'s browser');
      const page = await me.context.newPage();
      try {
        // RP-initiated logout at Hydra; the login app asks, then ends the Kratos session and Hydra's. With
        // the web app the contributor starts it where a person would: the app's sign-out link ("Abmelden",
        // /logout), which sends the browser to Hydra's end-session endpoint (the site's LOGOUT_URL).
        if (ctx.webApp) {
          doing(`the sign-out link on ${ctx.webApp.target.domain}`);
          await page.goto(https(ctx.webApp.target.domain, '/'));
          await page.locator('a[href="/logout"]').click({ timeout: 30_000 });
          await page.waitForURL((url) => url.hostname !== ctx.webApp!.target.domain, { timeout: 30_000 });
        } else {
          doing("Hydra's logout page and the login app's question");
          await page.goto(https(domains.hydra!, '/oauth2/sessions/logout'));
        }
        // Done once Hydra has answered its logout verifier (where the browser lands after that, the
        // app's start page, is not part of this check).
        const verified = page.waitForResponse((r) => r.url().includes('logout_verifier='), { timeout: 15_000 });
        await page.getByRole('button', { name: 'Sign out' }).click();
        doing("Hydra's answer to the logout verifier");
        await verified;
        // Then Hydra sends the browser on to where a logout ends (the app's start page). Closing the page
        // while that navigation was still under way hung page.close() at the web app's start page (1 in
        // 2-3 --web-app runs, with and without its service worker: docs/rehearsal.md); so the page is
        // closed once it has landed off the identity domains (or after 30 s: where it lands is not checked).
        doing('the browser to land after the logout');
        const identity = new Set([domains.hydra, domains.auth, domains.kratos]);
        await page.waitForURL((url) => !identity.has(url.hostname), { waitUntil: 'load', timeout: 30_000 }).catch(() => undefined);
      } finally {
        doing(`the logout page to close (at ${page.url().slice(0, 100)})`);
        await page.close();
      }
      // The old cookie, and whatever the browser holds now, no longer sign anyone in. (Asked of the
      // browser by a request, not by reading its cookie jar: context.cookies() once never returned
      // after this logout, docs/rehearsal.md.)
      const kratosAnswer = await whoami(me.sessionCookie);
      assert(kratosAnswer.status === 401, `Kratos still knows the session after signing out (whoami ${kratosAnswer.status})`);
      const check = await me.context.newPage();
      try {
        doing(`${domains.kratos}/sessions/whoami in the contributor's browser`);
        const asked = await check.goto(https(domains.kratos!, '/sessions/whoami'));
        assert(asked?.status() === 401, `the contributor's browser is still signed in at Kratos after signing out (whoami ${asked?.status() ?? 0})`);
      } finally {
        doing('the whoami page to close');
        await check.close();
      }
      // The API caches a token's introspection for INTROSPECTION_CACHE_SECONDS (the stack: 10 s).
      const signedOut = Date.now();
      let last: Reply | undefined;
      const refused = await until('the old access token refused by the API', async () => {
        last = await viaProxy(stack, https(domains.api!, '/api/users'), { headers: { authorization: `Bearer ${me.accessToken}` } });
        return last.status === 401 ? true : undefined;
      }, 20_000).then(() => true, () => false);
      assert(refused, `the access token still signs in ${((Date.now() - signedOut) / 1000).toFixed(0)} s after signing out (${last?.status}: ${last?.body.slice(0, 120)})`);
      signedOutEverywhere = true;
      return `signed out ${ctx.webApp ? `from ${ctx.webApp.target.domain}'s sign-out link ` : ''}through Hydra and the login app: whoami with the old cookie and from the browser 401 at once, the old access token 401 after ${((Date.now() - signedOut) / 1000).toFixed(1)} s`;
    });
    if (ctx.webApp) {
      await stepOf('8b the web app then treats the contributor as a guest: its editor, open to them before signing out, sends them to sign in and offers no sign-out', async () => {
        const me = signedIn.get('contributor');
        assert(me && signedOutEverywhere, 'the contributor did not sign out (step 8 failed)');
        if (appBeforeSignOut instanceof Error) throw new Error(`before signing out: ${appBeforeSignOut.message.split('\n')[0]}`);
        assert(appBeforeSignOut?.status === 200 && appBeforeSignOut.path === '/features/new' && appBeforeSignOut.signOut > 0, `before signing out the app's editor answered ${appBeforeSignOut?.status ?? 0} at ${appBeforeSignOut?.path ?? '?'} (sign-out links: ${appBeforeSignOut?.signOut ?? 0}): the check would prove nothing`);
        const afterwards = await appEditorAs(me.context);
        assert(afterwards.path === '/login' && afterwards.signOut === 0, `after signing out the app's editor ended at ${afterwards.path} (${afterwards.status}) and offers ${afterwards.signOut} sign-out links`);
        return `${ctx.webApp!.target.domain}/features/new: the editor with a sign-out link before; after, the app sends the guest to /login (${afterwards.status}) and offers no sign-out`;
      });
    }
  } finally {
    // Bounded as every step is: a browser that does not close is killed when the rehearsal exits.
    if (browser) await Promise.race([browser.close(), new Promise((r) => setTimeout(r, 15_000).unref())]);
  }
  return results;
}
