/**
 * The build sandbox where systemd is PID 1 (DEPLOY_BUILD_SANDBOX=systemd): every build step is a
 * transient unit (`systemd-run --wait --pipe --collect`) with the site units' sandbox — the one list
 * in scripts/host/lib/team-code-sandbox.conf — plus the build's paths, network and limits. systemd
 * is not PID 1 in the test environment, so systemd-run is the one thing stood in for: a stand-in
 * that records its arguments and runs the command as the unit's User= in its working directory.
 * The recorded properties are then checked as a unit file by `systemd-analyze verify` and
 * `systemd-analyze security` where installed. Needs root; skipped with one printed line otherwise.
 */
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdirSync, readFileSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { lacks, requirements } from '../../../test/helpers/requirements.js';
import { teamCodeSandbox } from '../src/host/render/systemd.js';
import { ensureUsers, removeUsers, usersOf } from '../src/host/users.js';
import { FixtureRepo, fetchBuild, freePort, makeTempDir, restartFixtureSite, runScript, stopFixtureSites } from './support/helpers.js';
import { installPlatform } from './support/build-sandbox.js';
import { isolationMissing, teamUsers } from './support/root-paths.js';

const missing = isolationMissing();
if (missing) console.warn(`skipping build sandbox tests (systemd): ${missing}`);

const STAND_IN = `#!/usr/bin/env bash
# Test stand-in for systemd-run: records the arguments (one per line, each call after a --- line)
# and runs the command after -- as the unit's User= in its --working-directory, with its pipes.
set -euo pipefail
{ printf -- '---\\n'; printf '%s\\n' "$@"; } >>"$SYSTEMD_RUN_LOG"
user= dir=
while (($#)); do
  case $1 in
    -p) [[ $2 != User=* ]] || user=\${2#User=}; shift 2 ;;
    --working-directory=*) dir=\${1#*=}; shift ;;
    --) shift; break ;;
    *) shift ;;
  esac
done
cd -- "$dir"
exec setpriv "--reuid=$user" "--regid=$(id -g -- "$user")" --init-groups --no-new-privs -- "$@"
`;

const users = teamUsers('bd', ['a'] as const);
let root: string;
let installed: ReturnType<typeof installPlatform>;
let repo: FixtureRepo;
let port: number;
let calls: string[][];
const dir = () => join(root, 'sites', 'team-a');

describe.skipIf(missing)('each build step a transient systemd unit (DEPLOY_BUILD_SANDBOX=systemd)', () => {
  beforeAll(async () => {
    root = makeTempDir('build-sandbox-systemd');
    chmodSync(root, 0o711);
    ensureUsers(usersOf([users.a]));
    installed = installPlatform(root);
    repo = new FixtureRepo(join(root, 'repo'));
    port = await freePort();
    mkdirSync(join(root, 'sites'), { mode: 0o711 });
    mkdirSync(join(root, 'bin'));
    writeFileSync(join(root, 'bin/systemd-run'), STAND_IN, { mode: 0o755 });
    repo.commit('feature/team-a/unit', { VERSION: 'a-unit\n' });
    const result = await runScript(installed.script, ['feature/team-a/unit', dir(), String(port), repo.url], {
      PATH: `${join(root, 'bin')}:${process.env.PATH}`,
      SYSTEMD_RUN_LOG: join(root, 'systemd-run.log'),
      RESTART_COMMAND: restartFixtureSite,
      HEALTH_TIMEOUT_SECONDS: '20',
      BUILD_USER: users.a.buildUser,
      SITE_USER: users.a.siteUser,
      DEPLOY_BUILD_SANDBOX: 'systemd',
      DEPLOY_BUILD_PROXY_SOCKET: '',
    });
    expect(result.code, result.stderr).toBe(0);
    calls = readFileSync(join(root, 'systemd-run.log'), 'utf8')
      .split('---\n')
      .filter(Boolean)
      .map((call) => call.trimEnd().split('\n'));
  }, 60_000);

  afterAll(() => {
    if (root) {
      stopFixtureSites(root);
      rmSync(root, { recursive: true, force: true });
    }
    removeUsers([users.a.buildUser, users.a.siteUser]);
  });

  const propertiesOf = (call: string[]) => call.flatMap((arg, i) => (call[i - 1] === '-p' ? [arg] : []));
  /** The program a unit runs: what follows `--` and `env -i <the build's environment>`. */
  const commandOf = (call: string[]) => call.slice(call.indexOf('--') + 1).filter((arg, i) => !(i === 0 && arg === 'env') && !(i === 1 && arg === '-i') && !/^[A-Za-z_]\w*=/.test(arg))[0];

  it('runs the export, the package probe, npm ci and the build each in a unit of its own, and the site goes live', async () => {
    expect(calls.map(commandOf)).toEqual(['tar', 'timeout', 'npm', 'env']); // the build: env PATH=… sh -c '<build script>'
    const names = calls.map((call) => call.find((arg) => arg.startsWith('--unit='))!);
    expect(new Set(names).size).toBe(4);
    for (const call of calls) expect(call.slice(0, 5)).toEqual(['--quiet', '--wait', '--pipe', '--collect', '--service-type=exec']);
    expect(await fetchBuild(port)).toMatchObject({ version: 'a-unit' });
  });

  it('gives every unit the site units\' sandbox, the build user, its own paths only, no network and the limits', () => {
    const release = realpathSync(join(dir(), 'live'));
    for (const call of calls) {
      const properties = propertiesOf(call);
      const sandbox = teamCodeSandbox();
      expect(properties.slice(2, 2 + sandbox.length)).toEqual(sandbox);
      expect(properties).toEqual(
        expect.arrayContaining([
          `User=${users.a.buildUser}`,
          'UMask=0022',
          'TemporaryFileSystem=/dev/shm:mode=1777',
          `TemporaryFileSystem=${join(root, 'sites')}:ro`,
          `TemporaryFileSystem=${installed.platform}:ro`,
          'InaccessiblePaths=-/etc/webhook-server -/var/lib/webhook-server',
          `BindPaths=${release} ${join(dir(), 'cache')}`,
          `BindReadOnlyPaths=${join(dir(), 'shared/src/content')}`,
          'PrivateNetwork=yes',
          'IPAddressDeny=any',
          'MemoryMax=2147483648',
          'TasksMax=512',
          'CPUQuota=200%',
          'LimitFSIZE=1073741824',
          'RuntimeMaxSec=600',
        ]),
      );
      // The sites' UMask=0077 is in the shared list; the build's comes after it and wins.
      expect(properties.lastIndexOf('UMask=0022')).toBeGreaterThan(properties.indexOf('UMask=0077'));
    }
  });

  it.skipIf(lacks('systemd-analyze of the build unit', requirements.systemdAnalyze()))('the properties make a unit that systemd-analyze verifies, with an exposure of at most 2.0', () => {
    const unit = join(root, 'deploy-build.service');
    const last = calls.at(-1)!;
    writeFileSync(unit, ['[Service]', 'Type=exec', `WorkingDirectory=${last.find((a) => a.startsWith('--working-directory='))!.split('=')[1]}`, ...propertiesOf(last), 'ExecStart=/usr/bin/env true', ''].join('\n'));
    const verify = spawnSync('systemd-analyze', ['verify', unit], { encoding: 'utf8' });
    expect(verify.status, verify.stderr).toBe(0);
    const security = spawnSync('systemd-analyze', ['security', '--offline=true', unit], { encoding: 'utf8' });
    const exposure = Number(/Overall exposure level for .*: (\d+\.\d+)/.exec(security.stdout)?.[1]);
    console.log(`systemd-analyze security of a build unit: exposure ${exposure}`);
    expect(exposure).toBeLessThanOrEqual(2.0);
  });
});
