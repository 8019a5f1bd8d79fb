/**
 * A target whose site lives in a folder of its repository (siteDir, like services/web of this
 * repository): the webhook server and the host CLI hand it to the real deploy script as SITE_DIR,
 * so the target's shared content collection replaces that folder's src/content and the site runs
 * from there. The fixture site stands in for the Astro build (fast, offline).
 */
import { mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { pino } from 'pino';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Supervisor } from '../../infra/sites/supervisor.js';
import { loadTargets } from '../../services/shared/targets.js';
import { runHostCli } from '../../services/webhook/src/host/cli.js';
import { defaultLayout, renderSiteUnit } from '../../services/webhook/src/host/render/systemd.js';
import { deployEnv, deployScript, FixtureRepo, fetchBuild, freePort, makeTempDir, repoRoot, stopFixtureSites } from '../../services/webhook/test/support/helpers.js';
import { pushPayload, sendGitlab, startHarness, waitForDeployment, type Harness } from '../../services/webhook/test/support/webhook-harness.js';

const SITE_DIR = 'apps/site';
const root = makeTempDir('site-dir');
let repo: FixtureRepo;
let h: Harness;
let mainPort: number;
let developPort: number;

/**
 * The fixture site moved into apps/site, the way services/web sits in this repository: the root
 * package holds the dependencies and its build script builds the site in its folder. Its own
 * src/content holds repo-only.md, which a deploy with SITE_DIR replaces by the shared collection.
 */
function siteInSubfolder(): Record<string, string | null> {
  const fixture = (name: string) => readFileSync(join(repoRoot, 'test/fixtures/site', name), 'utf8');
  const pkg = JSON.parse(fixture('package.json')) as { scripts: Record<string, string> };
  pkg.scripts = { build: `cd ${SITE_DIR} && node build.mjs` };
  return {
    'package.json': `${JSON.stringify(pkg, null, 2)}\n`,
    'build.mjs': null,
    'server.mjs': null,
    VERSION: null,
    [`${SITE_DIR}/build.mjs`]: fixture('build.mjs'),
    [`${SITE_DIR}/server.mjs`]: fixture('server.mjs'),
    [`${SITE_DIR}/VERSION`]: 'in-subfolder\n',
    [`${SITE_DIR}/src/content/repo-only.md`]: 'the repository\'s own collection\n',
  };
}

/** The target's shared collection (deploy layout: <deployDir>/shared/src/content). */
function sharedContent(deployDir: string): void {
  mkdirSync(join(deployDir, 'shared/src/content'), { recursive: true });
  writeFileSync(join(deployDir, 'shared/src/content/shared-help.md'), '# Help\n');
}

beforeAll(async () => {
  repo = new FixtureRepo(join(root, 'repo'));
  repo.commit('main', siteInSubfolder(), 'the site moves into apps/site');
  repo.commit('develop', {}, 'develop starts');
  [mainPort, developPort] = [await freePort(), await freePort()];
  h = await startHarness({
    root: join(root, 'server'),
    targets: (targets) =>
      targets
        .filter((t) => t.key === 'main' || t.key === 'develop')
        .map((t) => ({ ...t, port: t.key === 'main' ? mainPort : developPort, repo: repo.url, siteDir: SITE_DIR })),
    env: { ...(deployEnv(root) as Record<string, string>), DEPLOY_SCRIPT: deployScript },
  });
  sharedContent(join(h.root, 'sites/main'));
}, 60_000);

afterAll(async () => {
  await h?.close();
  stopFixtureSites(root);
});

describe('a deploy target with its site in a folder of the repository (siteDir)', () => {
  it('a push through the webhook server deploys the site from its folder with the shared collection in place', async () => {
    const res = await sendGitlab(h.url, pushPayload('main', repo.head('main')), h.secrets.SECRET_MAIN!);
    expect(res.status).toBe(202);
    const deployment = await waitForDeployment(h, String(res.json.deploymentId), 90_000);
    expect(deployment).toMatchObject({ state: 'succeeded', deployedCommit: repo.head('main') });
    const build = await fetchBuild(mainPort);
    expect(build.version).toBe('in-subfolder');
    // Only SITE_DIR makes the script link the shared collection over apps/site/src/content.
    expect(build.content).toEqual(['shared-help.md']);
    expect(readFileSync(join(h.root, 'sites/main/live', SITE_DIR, 'src/content/shared-help.md'), 'utf8')).toBe('# Help\n');
  }, 120_000);

  it('a manual deploy with the host CLI passes the same SITE_DIR', () => {
    const deployDir = join(h.root, 'sites/develop');
    sharedContent(deployDir);
    const lines: string[] = [];
    const code = runHostCli(
      ['deploy', 'develop'],
      { ...process.env, ...(deployEnv(root) as Record<string, string>), TARGETS_FILE: join(h.root, 'targets.yaml'), DEPLOY_ROOT: join(h.root, 'sites'), DEPLOY_ISOLATION: 'none' },
      (line) => lines.push(line),
    );
    expect(code, lines.join('\n')).toBe(0);
    return fetchBuild(developPort).then((build) => expect(build.content).toEqual(['shared-help.md']));
  }, 120_000);

  it('the sites supervisor of the stack starts the site in the site folder of the live release', async () => {
    const deployDir = join(root, 'supervised');
    const siteRoot = join(deployDir, 'deploys/r1', SITE_DIR);
    mkdirSync(join(siteRoot, 'dist'), { recursive: true });
    writeFileSync(join(siteRoot, 'server.mjs'), readFileSync(join(repoRoot, 'test/fixtures/site/server.mjs')));
    writeFileSync(join(siteRoot, 'dist/build.json'), JSON.stringify({ version: 'supervised', content: [] }));
    symlinkSync('deploys/r1', join(deployDir, 'live'));
    const port = await freePort();
    const supervisor = new Supervisor({
      sites: [{ service: 'astro-main', port, deployDir, siteDir: SITE_DIR }],
      startCommand: [process.execPath, 'server.mjs'],
      host: '127.0.0.1',
      logger: pino({ level: 'silent' }),
      env: { PATH: process.env.PATH ?? '' },
    });
    try {
      await supervisor.restart('astro-main');
      expect((await fetchBuild(port)).version).toBe('supervised');
    } finally {
      await supervisor.stop('astro-main');
    }
  }, 60_000);

  it('the site unit runs from the site folder of the live release', () => {
    const target = { ...loadTargets(join(h.root, 'targets.yaml')).find((t) => t.key === 'main')! };
    expect(renderSiteUnit(target, defaultLayout)).toContain(`WorkingDirectory=${join(defaultLayout.deployRoot, 'main/live', SITE_DIR)}\n`);
  });
});

describe('the siteDir of a target', () => {
  const targetsWith = (siteDir: string) => {
    const file = join(root, `targets-${Buffer.from(siteDir).toString('hex')}.yaml`);
    const [main] = loadTargets(join(repoRoot, 'config/targets.yaml'));
    writeFileSync(file, stringify({ targets: [{ ...main, siteDir }] }));
    return () => loadTargets(file);
  };

  it.each(['../outside', 'services/../../etc', '/srv/other', './services/web', 'services//web', 'services/web/', 'a b', '..'])('refuses %j', (dir) => {
    expect(targetsWith(dir)).toThrow(/siteDir/);
  });

  it('accepts services/web, the platform\'s own web app, as config/targets.yaml sets it for main', () => {
    expect(targetsWith('services/web')()[0]?.siteDir).toBe('services/web');
    expect(loadTargets(join(repoRoot, 'config/targets.yaml')).find((t) => t.key === 'main')?.siteDir).toBe('services/web');
  });
});
