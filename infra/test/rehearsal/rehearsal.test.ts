import { spawn, spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadTargets } from '../../../services/shared/targets.js';
import { targetUids } from '../../stack/targets.js';
import { beforeAll, describe, expect, it } from 'vitest';
import { missingTools } from '../../rehearsal/rehearse.js';

/**
 * `npm run stack:rehearse -- --web-app` as CI runs it: the declared stack started on this machine and
 * driven end to end through the proxy, with the platform's web app deployed for main and a user's day
 * on its pages (docs/rehearsal.md). One test per step, so a failure names the step; then once more
 * without the web app and with two wires cut.
 * Needs root (initdb as the postgres user, Caddy on port 443 of its own loopback address),
 * PostgreSQL 15 + PostGIS, caddy, Chromium and git; .ci/run installs them all.
 */
const missing = missingTools();
if (missing) console.log(`skipping the stack rehearsal: ${missing}`);

const STEPS = [
  '1a a person registers through the accounts domain',
  '1b signs in through the login app and completes the OAuth2 code flow of the synced client',
  '2 the access token calls the API through the proxy with the role from Kratos metadata_public',
  '3 the session cookie from the login on another subdomain calls the API (single sign-on)',
  '4 a feature is created, submitted, and approved by a second user',
  "4b the approval leaves the platform through the QC worker's own way out: the reviewers' mail reaches the mail relay, the notice reaches the agency",
  "4c the approval's exports reach OSM and Wikibase over the QC worker's way out: the reviewer confirms each OSM plan, the changeset and the item arrive, the item's id goes back to OSM",
  '5 GeoServer provisioning ran against the GeoServer double',
  '5b a WFS-T insert through the proxy as a signed-in contributor is recorded under that user; anonymous WFS-T gets 401',
  "5c anonymous WFS and WMS through the proxy's public GeoServer route show the journey's feature only once approved; the editors' layer stays hidden",
  "6 a signed push reaches the webhook through the proxy; the target's builder builds it and the target's own site container serves it",
"6d each site is told what its target may know: the platform's sites where the API and sign-in are, a preview site the API only",
  '6b the branch site (code from team pushes) never receives the session cookie',
  "6c a site's code cannot take another target's port or the webhook's: it binds them in its own namespace and receives nothing",
  '7 the backup job writes a dump that restores into an empty cluster',
  '8 the contributor signs out everywhere: Hydra and Kratos end their sessions, the token and the cookie no longer sign anyone in',
];

/** The user's day on the web app as the webhook deploys it for main (`--web-app`, the first run only). */
const WEB_APP_STEPS = [
  "6e the platform's web app for main: a push builds services/web in the target's builder (npm ci from the target's npm cache, astro build), the target's site serves it, and its map loads the approved feature from the API through the proxy",
  "6f1 the contributor signs in on main.sites.example.org through the platform's sign-in (single sign-on) and opens the editor, a protected page the site's server checks with Kratos",
  '6f2 draws a polygon on the map, fills the form and saves it',
  '6f3 submits it for review on its page',
  '6f4 the reviewer signs in on the app, finds it on the QC desk (/qc), gives the TOTP code at the step-up and approves it',
  "6f5 the desk's approval leaves the platform as the API's does: the reviewers' mail and the agency notice name the drawn feature, and anonymous WFS and WMS show it only now",
  '8b the web app then treats the contributor as a guest: its editor, open to them before signing out, sends them to sign in and offers no sign-out',
];

/** Runs `npm run stack:rehearse` with these arguments: its output and exit code. */
async function rehearse(args: string[]): Promise<{ output: string; exitCode: number | null }> {
  const child = spawn(process.execPath, ['--import', 'tsx', join(import.meta.dirname, '../../rehearsal/rehearse.ts'), ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.on('data', (c: Buffer) => (output += c.toString()));
  child.stderr.on('data', (c: Buffer) => (output += c.toString()));
  const exitCode = await new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  console.log(output.split('\n').filter((l) => /^(PASS|FAIL|figure|stack up|rehearsal| {2}- )/.test(l)).join('\n'));
  return { output, exitCode };
}

const lineOf = (output: string, step: string) => output.split('\n').find((l) => l.slice(5).startsWith(step));

/** No process of any target's site or build user remains, and no rehearsal cgroup holds a process. */
function leftovers(): string[] {
  const uids = loadTargets(join(import.meta.dirname, '../../../config/targets.yaml')).flatMap((t) => Object.values(targetUids(t.deployPath)));
  const processes = uids.flatMap((uid) => {
    const found = spawnSync('pgrep', ['-a', '-U', String(uid)], { encoding: 'utf8' });
    return found.stdout.split('\n').filter(Boolean).map((line) => `uid ${uid}: ${line}`);
  });
  const cgroups = ['/sys/fs/cgroup/unified', '/sys/fs/cgroup/pids', '/sys/fs/cgroup/freezer', '/sys/fs/cgroup']
    .filter((root) => existsSync(join(root, 'cgroup.procs')))
    .flatMap((root) => readdirSync(root).filter((name) => name.startsWith('rehearsal-')).map((name) => join(root, name)))
    .filter((dir) => existsSync(join(dir, 'cgroup.procs')) && readFileSync(join(dir, 'cgroup.procs'), 'utf8').trim() !== '')
    .map((dir) => `cgroup ${dir} still holds processes`);
  return [...processes, ...cgroups];
}

// The two rehearsals run one after the other (one file): they share the proxy's address and the targets' users.
describe.skipIf(Boolean(missing))('the stack rehearsal with the web app (npm run stack:rehearse -- --web-app)', () => {
  let output = '';
  let exitCode: number | null = null;
  beforeAll(async () => {
    ({ output, exitCode } = await rehearse(['--web-app']));
  }, 900_000);

  it('brings every declared container up: the services healthy, every job exited 0', () => {
    const list = output.slice(output.indexOf('stack up after'), output.search(/^(PASS|FAIL) /m));
    expect(list).toMatch(/service\s+proxy\s+healthy/);
    expect(list).not.toMatch(/\bfailed\b|exit [1-9]/);
    expect(output).not.toContain('pulumi up would fail');
  });

  it.each([...STEPS, ...WEB_APP_STEPS])('passes step %s', (step) => {
    const line = lineOf(output, step);
    expect(line, `no line for step ${step}`).toBeDefined();
    expect(line).toMatch(/^PASS /);
  });

  it("leaves no process behind: none of its sites' and builds' users runs anything, and its cgroup is gone", () => {
    expect(leftovers()).toEqual([]);
  });

  it('exits 0 only when every step passed', () => {
    const failed = /^FAIL /m.test(output);
    expect(exitCode).toBe(failed ? 1 : 0);
  });
});

describe.skipIf(Boolean(missing))("the rehearsal with the QC worker's way out and the sites' settings cut (--break worker-egress --break site-settings): the mail, the exports and the sites' settings fail", () => {
  let output = '';
  let exitCode: number | null = null;
  const broken = ['4b ', '4c ', '6d '].map((number) => STEPS.find((s) => s.startsWith(number))!);
  beforeAll(async () => {
    ({ output, exitCode } = await rehearse(['--break', 'worker-egress', '--break', 'site-settings']));
  }, 900_000);

  it.each(broken)('fails step %s', (step) => {
    expect(lineOf(output, step)).toMatch(/^FAIL /);
  });

  it('passes every other step, and exits 1', () => {
    for (const step of STEPS.filter((s) => !broken.includes(s))) expect(lineOf(output, step), step).toMatch(/^PASS /);
    expect(exitCode).toBe(1);
  });

  it('runs no web-app step: without --web-app main gets no push', () => {
    for (const step of WEB_APP_STEPS) expect(lineOf(output, step), step).toBeUndefined();
  });

  it('leaves no process behind either', () => {
    expect(leftovers()).toEqual([]);
  });
});
