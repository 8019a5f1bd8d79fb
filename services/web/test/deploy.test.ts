/**
 * The platform's own site deployed by scripts/deploy-branch.sh (what the webhook runs): a target
 * pointing at a real git repository of this project with SITE_DIR=services/web. A commit that changes
 * the site is pushed to a local bare repository; after the deploy its page is served on the target's
 * port, and the target's shared content collection is used. The site is a package of its own
 * (services/web/package.json + lockfile): the deploy installs and builds only that, in the site's
 * folder, and a redeploy with an unchanged lockfile links the live release's dependencies. Prints
 * push-to-live times, cold and with an unchanged lockfile (bench/site-deploy.bench.ts measures them
 * against a baseline).
 *
 * Slow (a real `npm ci` of the site on the cold deploy): runs when WEB_DEPLOY_TEST=1 or in CI
 * (CI=true), and skips with one line otherwise.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../../shared/testing/ports.js';
import { git, publishCommittedProject } from '../../../test/helpers/git.js';
import { repoRoot } from './harness.js';

const enabled = process.env.WEB_DEPLOY_TEST === '1' || process.env.CI === 'true';
if (!enabled) console.log('skipping the site deploy test: set WEB_DEPLOY_TEST=1 (it runs a real npm ci of the site, minutes on a cold cache)');


describe.skipIf(!enabled)('deploying the site with deploy-branch.sh', () => {
  // Made in beforeAll: a skipped suite's body still runs to collect its tests, and must leave nothing behind.
  let root = '';
  let bare = '';
  let work = '';
  let target = '';
  let port = 0;

  beforeAll(async () => {
    root = mkdtempSync(join(tmpdir(), 'web-deploy-'));
    [bare, work, target] = [join(root, 'site.git'), join(root, 'work'), join(root, 'target')];
    port = await freePort();
    publishCommittedProject(work, bare);
  });
  // Two releases with their node_modules: removing them takes minutes on a busy two-core machine.
  afterAll(async () => {
    if (!root) return;
    const pidfile = join(target, 'site.pid');
    if (existsSync(pidfile)) spawnSync('kill', [readFileSync(pidfile, 'utf8').trim()]);
    await rm(root, { recursive: true, force: true });
  }, 600_000);

  const deploy = () => {
    const started = performance.now();
    const result = spawnSync(join(repoRoot, 'scripts/deploy-branch.sh'), ['main', target, String(port), `file://${bare}`], {
      encoding: 'utf8',
      env: { ...process.env, SITE_DIR: 'services/web', RESTART_COMMAND: join(repoRoot, 'services/web/test/restart-site.sh'), HEALTH_TIMEOUT_SECONDS: '60', SERVICE_NAME: 'astro-main' },
    });
    const seconds = (performance.now() - started) / 1000;
    if (result.status !== 0) throw new Error(`deploy failed (${result.status}):\n${result.stdout}\n${result.stderr}`);
    return { seconds, log: result.stdout };
  };
  const page = async (path: string) => (await fetch(`http://127.0.0.1:${port}${path}`)).text();

  it('a pushed change to the site is served on the target port, with the target’s shared content', { timeout: 1_200_000 }, async () => {
    const cold = deploy();
    expect(await page('/')).toContain('<title>Karte · Kartierung</title>');
    // Only the site's own dependencies were installed, in its folder; none of the platform's at the root.
    expect(existsSync(join(target, 'live/services/web/node_modules/astro/package.json'))).toBe(true);
    expect(existsSync(join(target, 'live/node_modules'))).toBe(false);

    // A change to the site and a help page in the target's shared collection.
    const catalogue = join(work, 'services/web/src/i18n/de.ts');
    writeFileSync(catalogue, readFileSync(catalogue, 'utf8').replace("'site.title': 'Kartierung'", "'site.title': 'Kartierung Nord'"));
    git(work, 'commit', '-qam', 'a new site title');
    git(work, 'push', '-q', bare, 'main');
    mkdirSync(join(target, 'shared/src/content/help/de'), { recursive: true });
    writeFileSync(join(target, 'shared/src/content/help/de/geteilt.md'), '---\ntitle: Hilfe aus dem geteilten Ordner\n---\nText.\n');

    const warm = deploy();
    expect(warm.log).toContain('lockfile unchanged: reused dependencies');
    expect(await page('/')).toContain('<title>Karte · Kartierung Nord</title>');
    expect(await page('/help')).toContain('Hilfe aus dem geteilten Ordner');
    console.log(`push-to-live of the site: cold ${cold.seconds.toFixed(1)} s, unchanged lockfile ${warm.seconds.toFixed(1)} s (target ≤ 20 s)`);
  });
});
