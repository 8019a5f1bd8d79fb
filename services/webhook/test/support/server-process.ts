/**
 * The webhook server as deployed: its own process (services/webhook/src/server.ts) with the seed
 * targets, a secret per target and the recording deploy script. The port comes over the IPC channel
 * (boot.ts), whatever LOG_LEVEL hides. The caller stops it (child.kill).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { makeTempDir, recordDeployScript, repoRoot } from './helpers.js';
import { seedTargets } from './webhook-harness.js';

export interface ServerProcess {
  child: ChildProcess;
  url: string;
  port: number;
  /** Secret by environment variable name (SECRET_MAIN …). */
  secrets: Record<string, string>;
  /** Where the recording deploy script writes each call; absent until a deploy ran. */
  recordFile: string;
}

export async function startWebhookProcess(label: string, env: Record<string, string> = {}): Promise<ServerProcess> {
  const dir = makeTempDir(label);
  const secrets = Object.fromEntries(seedTargets().map((t) => [t.secret, randomBytes(32).toString('hex')]));
  const recordFile = join(dir, 'recorded-deploys.jsonl');
  const child = spawn(process.execPath, ['--import', 'tsx', 'services/webhook/src/server.ts'], {
    cwd: repoRoot,
    env: {
      PATH: process.env.PATH,
      ...secrets,
      WEBHOOK_PORT: '0',
      WEBHOOK_STATE_DIR: join(dir, 'state'),
      DEPLOY_ROOT: join(dir, 'sites'),
      DEPLOY_SCRIPT: recordDeployScript,
      RECORD_DEPLOY_FILE: recordFile,
      DEPLOY_ENV_PASS: 'RECORD_DEPLOY_FILE',
      WEBHOOK_AUTH_FAILURES_PER_MINUTE: '1000',
      LOG_LEVEL: 'warn',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'inherit', 'ipc'],
  });
  child.stdout!.resume();
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('the server did not listen within 20 s')), 20_000);
    child.on('message', (message: { listening?: number }) => {
      if (message.listening === undefined) return;
      clearTimeout(timer);
      resolve(message.listening);
    });
    child.once('exit', (code) => reject(new Error(`the server exited with ${code}`)));
  });
  return { child, url: `http://127.0.0.1:${port}`, port, secrets, recordFile };
}
