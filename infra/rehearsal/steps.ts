/**
 * The rehearsal's end-to-end steps: the platform driven through the proxy (Caddy on its own loopback
 * IP, ports 80/443, its internal CA) as users and git hosts would drive it. Host names never touch
 * /etc/hosts: Chromium maps them with --host-resolver-rules, Node connects to the proxy's IP with the
 * name as TLS server name and Host header.
 */
import { execFileSync } from 'node:child_process';
import { createHmac, randomBytes } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { request } from 'node:https';
import { join } from 'node:path';
import { Secret, TOTP } from 'otpauth';
import { chromium, type Browser, type BrowserContext } from 'playwright-core';
import { freePort } from '../../services/shared/testing/ports.js';
import { spawnInNetnsOf } from './netns.js';
import { startCluster } from './postgres.js';
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
  /** Stand-ins outside the stack: the mail relay (SMTP), who reviews, and what the agency received. */
  outside: { mail: SmtpDouble; reviewers: string; agency: { path: string; body: string }[] };
  say(line: string): void;
}

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

async function step(results: StepResult[], name: string, run: () => Promise<string | undefined>): Promise<boolean> {
  const began = Date.now();
  try {
    const detail = await run();
    results.push({ step: name, ok: true, ...(detail ? { detail } : {}), ms: Date.now() - began });
    return true;
  } catch (error) {
    results.push({ step: name, ok: false, detail: (error as Error).message.split('\n').slice(0, 4).join(' '), ms: Date.now() - began });
    return false;
  }
}

function assert(condition: unknown, message: string): asserts condition {
  if (!condition) throw new Error(message);
}

/** Thrown by a probe that has seen the outcome will not come (a delivery refused): until() stops at once. */
class GaveUp extends Error {}

async function until<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs: number): Promise<T> {
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

interface SignedIn {
  accessToken: string;
  sessionCookie: string;
  context: BrowserContext;
}

export async function runSteps(stack: RehearsalStack, ctx: StepContext): Promise<StepResult[]> {
  const results: StepResult[] = [];
  const { domains } = ctx;
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

    const signIn = async (who: keyof typeof people): Promise<SignedIn> => {
      assert(hydra?.clients.has('map-editor'), 'the map-editor client is not in Hydra: the clients-sync job did not sync it');
      assert(clientSecret, `no client secret in the clients-sync log: ${syncLog.slice(0, 4).join(' | ')}`);
      const person = people[who];
      // Chromium trusts Caddy's internal CA only through this flag (the CA is made per run).
      const context = await browser!.newContext({ ignoreHTTPSErrors: true });
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

    // 1 ------------------------------------------------------------------------------------------
    await step(results, '1a a person registers through the accounts domain', async () => {
      const context = await browser!.newContext({ ignoreHTTPSErrors: true });
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
        await context.close();
      }
    });
    // The people exist in Kratos from here on (as if registered), with their role in metadata_public.
    for (const person of Object.values(people)) kratos?.addIdentity(person);
    await step(results, '1b signs in through the login app and completes the OAuth2 code flow of the synced client', async () => {
      const me = await signIn('contributor');
      assert(hydra!.tokens.has(me.accessToken), 'the access token is not one Hydra issued');
      assert(!/^ey[\w-]+\.ey/.test(me.accessToken), 'a JWT access token, but hydra.yml issues opaque ones');
      return `client map-editor, opaque access token (${me.accessToken.length} chars), session cookie on .${ctx.parentDomain}`;
    });

    // 2 ------------------------------------------------------------------------------------------
    let featureId = '';
    await step(results, '2 the access token calls the API through the proxy with the role from Kratos metadata_public', async () => {
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
    await step(results, '3 the session cookie from the login on another subdomain calls the API (single sign-on)', async () => {
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

    // 4 ------------------------------------------------------------------------------------------
    await step(results, '4 a feature is created, submitted, and approved by a second user', async () => {
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
    await step(results, "4b the approval leaves the platform through the QC worker's own way out: the reviewers' mail reaches the mail relay, the notice reaches the agency", async () => {
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

    await step(results, '5 GeoServer provisioning ran against the GeoServer double', async () => {
      const job = stack.containers.get('geoserver-provision');
      assert(job?.exitCode === 0, `geoserver-provision: ${job ? `exit ${job.exitCode}` : 'never started'}`);
      const geoserver = stack.geoserver!;
      assert(geoserver.violations.length === 0, `requests off the GeoServer REST contract: ${geoserver.violations.join('; ')}`);
      const state = geoserver.state;
      assert(state.workspaces.size > 0 && state.datastores.size > 0 && state.featureTypes.size > 0, `nothing provisioned: ${JSON.stringify({ w: [...state.workspaces], d: [...state.datastores.keys()] })}`);
      return `${job.log.filter((l) => l.startsWith('geoserver:')).length} changes (${[...state.workspaces].join(', ')}; ${[...state.featureTypes.keys()].join(', ')})`;
    });

    // 5b -----------------------------------------------------------------------------------------
    await step(results, '5b a WFS-T insert through the proxy as a signed-in contributor is recorded under that user; anonymous WFS-T gets 401', async () => {
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

    // 6 ------------------------------------------------------------------------------------------
    await step(results, "6 a signed push reaches the webhook through the proxy; the target's builder builds it and the target's own site container serves it", async () => {
      const secrets = await new Promise<Record<string, string>>((resolve) => (stack.program.webhookSecrets as { apply(f: (v: Record<string, string>) => void): void }).apply(resolve));
      const secret = secrets[ctx.pushTarget.secretName];
      assert(secret, `no webhook secret ${ctx.pushTarget.secretName} among the stack outputs`);
      const marker = `rehearsal-${randomBytes(4).toString('hex')}`;
      const git = (...args: string[]) => execFileSync('git', ['-C', ctx.fixtureRepo, ...args], { encoding: 'utf8', env: { ...process.env, GIT_AUTHOR_NAME: 'R', GIT_AUTHOR_EMAIL: 'r@example.org', GIT_COMMITTER_NAME: 'R', GIT_COMMITTER_EMAIL: 'r@example.org' } }).trim();
      git('checkout', '--quiet', '-B', ctx.pushTarget.branch);
      execFileSync('sh', ['-c', `printf '%s\\n' '${marker}' > VERSION`], { cwd: ctx.fixtureRepo });
      git('commit', '--quiet', '-am', marker);
      const after = git('rev-parse', 'HEAD');
      const body = JSON.stringify({ ref: `refs/heads/${ctx.pushTarget.branch}`, after, repository: { name: 'site' } });
      const headers: Record<string, string> = { 'content-type': 'application/json' };
      if (ctx.pushTarget.provider === 'github') {
        headers['x-github-event'] = 'push';
        headers['x-github-delivery'] = randomBytes(8).toString('hex');
        headers['x-hub-signature-256'] = `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`;
      } else {
        headers['x-gitlab-event'] = 'Push Hook';
        headers['x-gitlab-token'] = secret;
      }
      const delivered = await viaProxy(stack, https(domains.webhook!, '/webhook'), { method: 'POST', headers, body });
      assert(delivered.status === 202, `the webhook answered ${delivered.status}: ${delivered.body.slice(0, 200)}`);
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

    await step(results, "6d each site is told what its target may know: the platform's sites where the API and sign-in are, a preview site the API only", async () => {
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

    await step(results, '6b the branch site (code from team pushes) never receives the session cookie', async () => {
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

    await step(results, "6c a site's code cannot take another target's port or the webhook's: it binds them in its own namespace and receives nothing", async () => {
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
    await step(results, '7 the backup job writes a dump that restores into an empty cluster', async () => {
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
    await step(results, '8 the contributor signs out everywhere: Hydra and Kratos end their sessions, the token and the cookie no longer sign anyone in', async () => {
      const me = signedIn.get('contributor');
      assert(me, 'no signed-in contributor (step 1b failed)');
      const whoami = (cookie: string) => viaProxy(stack, https(domains.kratos!, '/sessions/whoami'), { headers: { cookie, accept: 'application/json' } });
      assert((await whoami(me.sessionCookie)).status === 200, 'the session cookie was not valid before signing out: the step would prove nothing');
      const page = await me.context.newPage();
      try {
        // RP-initiated logout at Hydra; the login app asks, then ends the Kratos session and Hydra's.
        await page.goto(https(domains.hydra!, '/oauth2/sessions/logout'));
        // Done once Hydra has answered its logout verifier (where the browser lands after that, the
        // app's start page, is not part of this check).
        const verified = page.waitForResponse((r) => r.url().includes('logout_verifier='), { timeout: 15_000 });
        await page.getByRole('button', { name: 'Sign out' }).click();
        await verified;
      } finally {
        await page.close();
      }
      const cookies = await me.context.cookies(https(domains.api!));
      const session = cookies.find((c) => c.name === 'ory_kratos_session');
      const kratosAnswer = await whoami(session ? `${session.name}=${session.value}` : me.sessionCookie);
      assert(kratosAnswer.status === 401, `Kratos still knows the session after signing out (whoami ${kratosAnswer.status})`);
      // The API caches a token's introspection for INTROSPECTION_CACHE_SECONDS (the stack: 10 s).
      const signedOut = Date.now();
      let last: Reply | undefined;
      const refused = await until('the old access token refused by the API', async () => {
        last = await viaProxy(stack, https(domains.api!, '/api/users'), { headers: { authorization: `Bearer ${me.accessToken}` } });
        return last.status === 401 ? true : undefined;
      }, 20_000).then(() => true, () => false);
      assert(refused, `the access token still signs in ${((Date.now() - signedOut) / 1000).toFixed(0)} s after signing out (${last?.status}: ${last?.body.slice(0, 120)})`);
      return `signed out through Hydra and the login app: whoami with the old cookie 401 at once, the old access token 401 after ${((Date.now() - signedOut) / 1000).toFixed(1)} s`;
    });
  } finally {
    await browser?.close();
  }
  return results;
}
