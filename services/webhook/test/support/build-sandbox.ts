/**
 * Helpers for the build sandbox and site listener tests (services/webhook/test/build-sandbox*.test.ts,
 * site-listener*.test.ts): what they need to run, the platform installed as an operator installs it
 * (root-owned, readable by everyone), and a listener run as another Unix user.
 */
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { chmodSync, cpSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { repoRoot } from './helpers.js';
import { isolationMissing } from './root-paths.js';

/**
 * Why the sandbox tests cannot run here, or undefined: not root, a tool missing, or bubblewrap
 * present but unable to make its namespaces as an unprivileged user (a kernel without unprivileged
 * user namespaces, a container's seccomp profile).
 */
export function sandboxMissing(): string | undefined {
  const missing = isolationMissing();
  if (missing) return missing;
  if (spawnSync('sh', ['-c', 'command -v bwrap']).status !== 0) return 'bwrap is not installed (apt-get install bubblewrap)';
  const probe = spawnSync('setpriv', ['--reuid=65534', '--regid=65534', '--clear-groups', '--', 'bwrap', '--unshare-all', '--unshare-user', '--ro-bind', '/', '/', 'true'], { encoding: 'utf8' });
  if (probe.status !== 0) return `bwrap cannot make a sandbox as an unprivileged user here: ${probe.stderr.trim() || `exit ${probe.status}`}`;
  return undefined;
}

/**
 * The platform as installed on a host, under `root`: its scripts, its configuration (the targets
 * file) and the webhook's secrets folder with a root-only secrets file, like /opt/platform and
 * /etc/webhook-server. Returns the paths a build must not see.
 */
export function installPlatform(root: string): { platform: string; script: string; rollback: string; targetsFile: string; secretsDir: string; secretsFile: string } {
  const platform = join(root, 'platform');
  mkdirSync(join(platform, 'scripts'), { recursive: true });
  mkdirSync(join(platform, 'config'), { recursive: true });
  cpSync(join(repoRoot, 'scripts/deploy-branch.sh'), join(platform, 'scripts/deploy-branch.sh'));
  cpSync(join(repoRoot, 'scripts/host'), join(platform, 'scripts/host'), { recursive: true });
  cpSync(join(repoRoot, 'config/targets.yaml'), join(platform, 'config/targets.yaml'));
  execFileSync('chmod', ['-R', 'u=rwX,go=rX', platform]);
  const secretsDir = join(root, 'etc-webhook-server');
  mkdirSync(secretsDir, { mode: 0o755 });
  const secretsFile = join(secretsDir, 'secrets.env');
  writeFileSync(secretsFile, `SECRET_MAIN=${'ab'.repeat(32)}\n`, { mode: 0o600 });
  chmodSync(secretsFile, 0o600);
  return {
    platform,
    script: join(platform, 'scripts/deploy-branch.sh'),
    rollback: join(platform, 'scripts/host/rollback.sh'),
    targetsFile: join(platform, 'config/targets.yaml'),
    secretsDir,
    secretsFile,
  };
}

/**
 * An HTTP listener on 127.0.0.1:<port> run as `user` that answers every request with 200 and
 * `body`, retrying the bind every 10 ms until the port is free: a site of another team waiting to
 * take a target's port. `listening` resolves once it holds the port.
 */
export function squatPort(user: string, port: number, body: string): { child: ChildProcess; listening: Promise<void> } {
  const code = `
    const { createServer } = require('node:http');
    const server = createServer((req, res) => res.writeHead(200, { 'content-type': 'application/json' }).end(${JSON.stringify(body)}));
    const tryListen = () => server.listen(${port}, '127.0.0.1');
    server.on('error', () => setTimeout(tryListen, 10));
    server.on('listening', () => console.log('listening'));
    tryListen();`;
  const child = spawn('setpriv', [`--reuid=${user}`, `--regid=${user}`, '--init-groups', '--', process.execPath, '-e', code], { stdio: ['ignore', 'pipe', 'inherit'], cwd: '/' });
  const listening = new Promise<void>((resolve, reject) => {
    child.once('exit', (status) => reject(new Error(`the squatter exited with ${status}`)));
    child.stdout!.on('data', (chunk: Buffer) => {
      if (chunk.toString().includes('listening')) resolve();
    });
  });
  return { child, listening };
}
