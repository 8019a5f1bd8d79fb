/**
 * `npm run stack:rehearse`: the declared stack, run on this machine (docs/rehearsal.md).
 *
 * 1. The Pulumi program under mocks that start every container as what it really is (runner.ts).
 * 2. The platform driven end to end through the proxy, one line per step (steps.ts).
 * 3. Everything stopped and removed.
 *
 * Exit codes: 0 every step passed, 1 a step failed (or the stack did not come up), 2 this machine
 * lacks what the rehearsal needs (the line says what).
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parse as parseYaml, stringify as toYaml } from 'yaml';
import { locateContracts } from '../../services/shared/contracts.js';
import { listen } from '../../services/shared/http-server.js';
import { startMediaWikiDouble } from '../../services/shared/testing/mediawiki-api.js';
import { startOsmApiDouble } from '../../services/shared/testing/osm-api.js';
import { startSmtpDouble } from '../../services/shared/testing/smtp.js';
import { UPSTREAMS } from '../routes.js';
import { exampleConfig } from '../testing/pulumi-mocks.js';
import { clusterUnavailable } from './postgres.js';
import { BROKEN_WIRES, rehearseStack, type BrokenWire } from './runner.js';
import { CHROMIUM, runSteps } from './steps.js';

export function missingTools(): string | undefined {
  const pg = clusterUnavailable();
  if (pg) return pg;
  if (spawnSync('caddy', ['version']).status !== 0) return 'caddy not found (apt-get install caddy)';
  if (!existsSync(CHROMIUM)) return `no Chromium at ${CHROMIUM} (apt-get install chromium, or set CHROMIUM_PATH)`;
  if (spawnSync('git', ['--version']).status !== 0) return 'git not found (apt-get install git)';
  // Sites and builders start in network namespaces of their own, as their own users.
  if (process.getuid?.() !== 0) return 'not root: the sites and builders start in network namespaces of their own, as their own users';
  for (const [tool, args, pkg] of [['unshare', ['--version'], 'util-linux'], ['nsenter', ['--version'], 'util-linux'], ['setpriv', ['--version'], 'util-linux'], ['ip', ['-V'], 'iproute2']] as const) {
    if (spawnSync(tool, [...args]).status !== 0) return `${tool} not found (apt-get install ${pkg})`;
  }
  // The Ory and GeoServer doubles answer from the vendored upstream contracts (a copy that differs from
  // its pins is no missing tool: locateContracts throws, and the rehearsal fails with exit code 1).
  const contracts = locateContracts();
  if (!contracts.ok) return contracts.reason;
  return undefined;
}

const REPO = join(import.meta.dirname, '..', '..');
const REHEARSAL_REVIEWERS = 'qc-desk@example.org';

/** The agency's endpoint outside the stack: records every notice posted to it. */
async function startAgencyStandIn(): Promise<{ server: Server; port: number; received: { path: string; body: string }[] }> {
  const received: { path: string; body: string }[] = [];
  const server = createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => (body += chunk.slice(0, 1_000_000)));
    req.on('end', () => {
      received.push({ path: req.url ?? '', body });
      res.writeHead(204).end();
    });
  });
  const port = await listen(server, 0, '127.0.0.1');
  return { server, port, received };
}

/**
 * `--web-app`: the platform's web app as a git repository, the way `main` deploys it (siteDir
 * services/web): this repository's HEAD, services/web with what it imports (services/shared) and
 * config/, committed on main. Committed files only, so what is walked is what a push would deploy.
 */
function createWebAppRepo(dir: string): string {
  mkdirSync(dir, { recursive: true });
  const archive = spawnSync('git', ['-C', REPO, 'archive', '--format=tar', 'HEAD', 'services/web', 'services/shared', 'config'], { maxBuffer: 512 * 1024 * 1024 });
  if (archive.status !== 0) throw new Error(`git archive of the web app failed: ${archive.stderr.toString()}`);
  execFileSync('tar', ['-x', '-C', dir], { input: archive.stdout });
  const git = (...args: string[]) =>
    execFileSync('git', ['-C', dir, ...args], { env: { ...process.env, GIT_AUTHOR_NAME: 'R', GIT_AUTHOR_EMAIL: 'r@example.org', GIT_COMMITTER_NAME: 'R', GIT_COMMITTER_EMAIL: 'r@example.org' } });
  git('init', '--quiet', '--initial-branch=main');
  git('add', '-A');
  git('commit', '--quiet', '-m', 'the web app');
  return dir;
}

/** The fixture site (test/fixtures/site: no dependencies, `npm run build`, `npm start`) as a git repository. */
function createFixtureRepo(dir: string): string {
  mkdirSync(dir, { recursive: true });
  cpSync(join(REPO, 'test/fixtures/site'), dir, { recursive: true, filter: (p) => !p.includes('node_modules') && !p.endsWith('/dist') });
  const git = (...args: string[]) =>
    execFileSync('git', ['-C', dir, ...args], { env: { ...process.env, GIT_AUTHOR_NAME: 'R', GIT_AUTHOR_EMAIL: 'r@example.org', GIT_COMMITTER_NAME: 'R', GIT_COMMITTER_EMAIL: 'r@example.org' } });
  git('init', '--quiet', '--initial-branch=main');
  git('add', '-A');
  git('commit', '--quiet', '-m', 'fixture site');
  return dir;
}

async function main(): Promise<number> {
  const missing = missingTools();
  if (missing) {
    console.log(`stack:rehearse cannot run here: ${missing}`);
    return 2;
  }
  const verbose = process.argv.includes('--verbose');
  const webApp = process.argv.includes('--web-app');
  const breakWires = process.argv.flatMap((arg, i) => (arg === '--break' ? [process.argv[i + 1] ?? ''] : []));
  const unknown = breakWires.filter((w) => !(BROKEN_WIRES as readonly string[]).includes(w));
  if (unknown.length) {
    console.log(`usage: npm run stack:rehearse -- [--verbose] [--web-app] [--break ${BROKEN_WIRES.join('|')}]…`);
    return 2;
  }
  if (breakWires.length) console.log(`rehearsing with broken wires: ${breakWires.join(', ')}`);
  const began = Date.now();
  const scratch = mkdtempSync(join(tmpdir(), 'rehearsal-'));
  const elapsed = () => `${((Date.now() - began) / 1000).toFixed(1)} s`;
  const say = (line: string) => {
    if (verbose) console.log(`  [${elapsed()}] ${line}`);
  };
  let failed = false;
  // The example stack configuration plus the one secret an operator must give (the others are
  // generated by the program's RandomPassword/RandomBytes resources, as on a first `pulumi up`), and
  // the repository's targets file with every repository URL pointing at a local fixture repository.
  const fixtureRepo = createFixtureRepo(join(scratch, 'site-repo'));
  const targetsFile = join(scratch, 'targets.yaml');
  const targets = parseYaml(readFileSync(join(REPO, 'config/targets.yaml'), 'utf8')) as {
    targets: { key: string; domain: string; repo: string; secret: string; provider: 'github' | 'gitlab'; matchPattern: string; deployPath: string; port: number; siteDir?: string }[];
  };
  const webAppRepo = webApp ? createWebAppRepo(join(scratch, 'web-app-repo')) : undefined;
  const mainTarget = targets.targets.find((t) => t.key === 'main');
  for (const target of targets.targets) target.repo = `file://${webAppRepo && target === mainTarget ? webAppRepo : fixtureRepo}`;
  writeFileSync(targetsFile, toYaml(targets));
  const base = exampleConfig();
  // The world outside the stack: a mail relay and the agency's endpoint, reachable only over a network
  // with a route out (the QC worker's worker-out); the approvals of the journey must arrive there.
  const mailRelay = await startSmtpDouble();
  const agency = await startAgencyStandIn();
  // The OSM API 0.6 and Wikibase stand-ins (the contract-strict doubles the export tests use), with the
  // exporter's account on each; the worker's credentials for them are Pulumi secrets of the stack.
  const osmToken = randomBytes(24).toString('base64url');
  const wikiPassword = randomBytes(18).toString('base64url');
  const osm = await startOsmApiDouble({ users: { [osmToken]: { uid: 4711, displayName: 'city-import' } } });
  const wiki = await startMediaWikiDouble({ users: [{ name: 'CityFeatureBot', loginName: 'CityFeatureBot@export', password: wikiPassword, bot: false }] });
  const outside = [
    { alias: 'mail-relay', port: 2525, loopbackPort: mailRelay.port },
    { alias: 'agency-endpoint', port: 8443, loopbackPort: agency.port },
    { alias: 'osm-api', port: 8100, loopbackPort: Number(new URL(osm.url).port) },
    { alias: 'wikibase', port: 8200, loopbackPort: Number(new URL(wiki.url).port) },
  ];
  const config = {
    ...base,
    smtpConnectionUri: 'smtp://rehearsal:unused@127.0.0.1:9/',
    targetsFile,
    exportsSmtpUrl: 'smtp://mail-relay:2525',
    agencyWebhookSecret: randomBytes(32).toString('hex'),
    osmAccessToken: osmToken,
    wikibasePassword: wikiPassword,
    exportSettings: {
      ...(base.exportSettings as Record<string, string> | undefined),
      REVIEWER_EMAILS: REHEARSAL_REVIEWERS,
      AGENCY_WEBHOOK_URL: 'http://agency-endpoint:8443/notices',
      OSM_API_URL: 'http://osm-api:8100',
      WIKIBASE_URL: 'http://wikibase:8200',
      WIKIBASE_USERNAME: 'CityFeatureBot@export',
      EXPORT_DATA_LICENCE: 'CC0-1.0',
      EXPORT_CONTACT: 'qc@example.org',
    },
  };
  // A signed push: the first target of a provider that signs its deliveries (GitHub's HMAC), else the first.
  const pushTo = targets.targets.find((t) => t.provider === 'github') ?? targets.targets[0]!;
  const pushTarget = {
    key: pushTo.key,
    branch: pushTo.matchPattern === 'prefix' ? `${pushTo.key}/rehearsal` : pushTo.key,
    domain: pushTo.domain,
    secretName: pushTo.secret,
    provider: pushTo.provider,
    deployPath: pushTo.deployPath,
    port: pushTo.port,
  };
  const other = targets.targets.find((t) => t.key !== pushTo.key)!;
  const figures: Record<string, string> = {};
  const stack = await rehearseStack({ scratch, config, say, outside, breakWires: breakWires as BrokenWire[], sitesReachProxy: webApp });
  try {
    console.log(`stack up after ${elapsed()}:`);
    for (const c of stack.containers.values()) {
      const state = c.exitCode !== undefined ? `exit ${c.exitCode}` : c.status;
      console.log(`  ${c.kind.padEnd(7)} ${c.name.padEnd(20)} ${state.padEnd(12)} ${c.as}${c.detail ? ` — ${c.detail}` : ''}`);
      if (c.status === 'failed') console.log(c.log.slice(-15).map((l) => `      | ${l}`).join('\n'));
    }
    if (verbose) console.table(stack.endpoints.table());
    const upFailures = stack.findings.filter((f) => f.startsWith('pulumi up would fail'));
    if (upFailures.length) failed = true;
    const results = await runSteps(stack, {
      domains: base.domains as Record<string, string>,
      parentDomain: String(base.parentDomain),
      fixtureRepo,
      pushTarget,
      otherTarget: { key: other.key, deployPath: other.deployPath, port: other.port },
      webhookPort: UPSTREAMS.webhook.port,
      outside: { mail: mailRelay, reviewers: REHEARSAL_REVIEWERS, agency: agency.received, osm, wiki },
      figures,
      ...(webAppRepo && mainTarget
        ? {
            webApp: {
              repo: webAppRepo,
              npmCache: execFileSync('npm', ['config', 'get', 'cache'], { encoding: 'utf8' }).trim(),
              target: { key: mainTarget.key, domain: mainTarget.domain, deployPath: mainTarget.deployPath, secretName: mainTarget.secret, provider: mainTarget.provider },
            },
          }
        : {}),
      say,
    });
    for (const r of results) {
      console.log(`${r.ok ? 'PASS' : 'FAIL'} ${r.step}${r.detail ? ` — ${r.detail}` : ''} (${(r.ms / 1000).toFixed(1)} s)`);
      if (!r.ok) failed = true;
    }
    for (const [name, value] of Object.entries(figures)) console.log(`figure ${name}: ${value}`);
    const unreachable = stack.endpoints.references.filter((r) => !r.reachable);
    for (const r of unreachable) stack.findings.push(`${r.from} refers to ${r.to}, which it cannot reach on its declared networks`);
    if (stack.findings.length) {
      console.log('findings:');
      for (const f of [...new Set(stack.findings)]) console.log(`  - ${f}`);
    }
  } finally {
    const before = stack.findings.length;
    await stack.stop();
    // Nothing may outlive the rehearsal (its cgroup is emptied by SIGKILL after the grace period).
    for (const survivor of stack.findings.slice(before)) {
      console.log(`FAIL nothing outlives the rehearsal — ${survivor}`);
      failed = true;
    }
    rmSync(scratch, { recursive: true, force: true });
    // The stand-ins outside the stack, bounded like every close of the rehearsal.
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<'late'>((resolve) => (timer = setTimeout(() => resolve('late'), 5_000)));
    agency.server.closeAllConnections();
    const standIns = Promise.all([mailRelay.stop(), new Promise((resolve) => agency.server.close(resolve)), osm.close(), wiki.close()]);
    if ((await Promise.race([standIns, late])) === 'late') {
      console.log('FAIL nothing outlives the rehearsal — closing the stand-ins outside the stack did not finish within 5 s');
      failed = true;
    }
    clearTimeout(timer);
  }
  console.log(`rehearsal ${failed ? 'FAILED' : 'passed'} in ${elapsed()}`);
  return failed ? 1 : 0;
}

if (process.argv[1] && import.meta.url === new URL(`file://${process.argv[1]}`).href) {
  main().then(
    (code) => process.exit(code),
    (error: unknown) => {
      console.error(error);
      process.exit(1);
    },
  );
}
