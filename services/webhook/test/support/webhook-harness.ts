/**
 * Starts the webhook server in-process on port 0 with the five seed targets (ports and repository
 * URLs adjusted for the test), a mode-600 secrets file and a private state directory, and signs
 * requests the way GitLab and GitHub do.
 */
import { createHmac, randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { stringify } from 'yaml';
import { createLogger } from '../../../shared/logger.js';
import { loadTargets, type Target } from '../../../shared/targets.js';
import { writeSecretsFile } from '../../src/secrets.js';
import { startWebhookServer, type RunningWebhookServer } from '../../src/boot.js';
import { eventually } from '../../../../test/helpers/wait.js';
import { makeTempDir, recordDeployScript, repoRoot } from './helpers.js';

/**
 * The seed targets without their site folder: tests replace the repository with a fixture repository
 * that holds the site at its root (test/journeys/webhook-site-dir.test.ts sets siteDir itself).
 */
export const seedTargets = (): Target[] => loadTargets(join(repoRoot, 'config/targets.yaml')).map(({ siteDir: _siteDir, ...target }) => target);

export interface Harness {
  server: RunningWebhookServer;
  url: string;
  root: string;
  secrets: Record<string, string>;
  adminToken: string;
  targets: Target[];
  /** Every log line the server wrote. */
  logs: () => string;
  /** Calls of the recording deploy script: argument vectors and selected environment. */
  recordedDeploys: () => { args: string[]; env: Record<string, string> }[];
  close: () => Promise<void>;
}

export interface HarnessOptions {
  env?: Record<string, string>;
  /** Reuse a directory (state survives a restart). */
  root?: string;
  secrets?: Record<string, string>;
  targets?: (targets: Target[]) => Target[];
}

export async function startHarness(options: HarnessOptions = {}): Promise<Harness> {
  const root = options.root ?? makeTempDir('webhook');
  mkdirSync(root, { recursive: true });
  const targets = (options.targets ?? ((t) => t))(seedTargets());
  const targetsFile = join(root, 'targets.yaml');
  writeFileSync(targetsFile, stringify({ targets }));
  const secrets = options.secrets ?? Object.fromEntries(targets.map((t) => [t.secret, randomBytes(32).toString('hex')]));
  const secretsFile = join(root, 'webhook-secrets.env');
  writeSecretsFile(secretsFile, secrets);
  const adminToken = 'admin-token-for-tests-0123456789';
  const recordFile = join(root, 'recorded-deploys.jsonl');
  let logText = '';
  const logger = createLogger('webhook', {
    level: 'debug',
    destination: new Writable({
      write(chunk: Buffer, _enc, done) {
        logText += chunk.toString();
        done();
      },
    }),
  });
  mkdirSync(join(root, 'sites'), { recursive: true });
  const server = await startWebhookServer({
    logger,
    env: {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      WEBHOOK_PORT: '0',
      TARGETS_FILE: targetsFile,
      DEPLOY_ROOT: join(root, 'sites'),
      DEPLOY_SCRIPT: recordDeployScript,
      WEBHOOK_STATE_DIR: join(root, 'state'),
      WEBHOOK_SECRETS_FILE: secretsFile,
      WEBHOOK_ADMIN_TOKEN: adminToken,
      WEBHOOK_AUTH_FAILURES_PER_MINUTE: '1000',
      RECORD_DEPLOY_FILE: recordFile,
      // The deploy script's environment is an allow-list: the stand-in's own settings pass by name.
      DEPLOY_ENV_PASS: 'RECORD_DEPLOY_FILE RECORD_DEPLOY_SLEEP RECORD_DEPLOY_EXIT',
      ...options.env,
    },
  });
  return {
    server,
    url: server.url,
    root,
    secrets,
    adminToken,
    targets,
    logs: () => logText,
    recordedDeploys: () =>
      existsSync(recordFile)
        ? readFileSync(recordFile, 'utf8')
            .trim()
            .split('\n')
            .map((line) => JSON.parse(line) as { args: string[]; env: Record<string, string> })
        : [],
    close: () => server.close(),
  };
}

export const commitId = (seed = randomBytes(20).toString('hex')): string => seed;

export function pushPayload(branch: string, after = commitId(), extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    ref: branch.startsWith('refs/') ? branch : `refs/heads/${branch}`,
    before: '0'.repeat(40),
    after,
    repository: { name: 'site', clone_url: 'https://attacker.example/evil.git', git_http_url: 'https://attacker.example/evil.git' },
    ...extra,
  };
}

export const githubSignature = (body: string | Buffer, secret: string): string =>
  `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`;

export interface SendOptions {
  headers?: Record<string, string>;
  method?: string;
  path?: string;
}

export async function send(url: string, body: string | Buffer, options: SendOptions = {}): Promise<{ status: number; json: Record<string, unknown>; headers: Headers }> {
  const response = await fetch(`${url}${options.path ?? '/webhook'}`, {
    method: options.method ?? 'POST',
    headers: { 'content-type': 'application/json', ...options.headers },
    body: options.method === 'GET' || options.method === 'HEAD' ? undefined : body,
  });
  const text = await response.text();
  let json: Record<string, unknown> = {};
  try {
    json = JSON.parse(text) as Record<string, unknown>;
  } catch {
    json = { nonJsonBody: text };
  }
  return { status: response.status, json, headers: response.headers };
}

/** A GitHub-style push (also Gitea/Forgejo) signed with `secret`. */
export function sendGithub(url: string, payload: unknown, secret: string, headers: Record<string, string> = {}) {
  const body = JSON.stringify(payload);
  return send(url, body, {
    headers: {
      'x-github-event': 'push',
      'x-github-delivery': randomBytes(16).toString('hex'),
      'x-hub-signature-256': githubSignature(body, secret),
      ...headers,
    },
  });
}

/** A GitLab push with `token` in X-Gitlab-Token. */
export function sendGitlab(url: string, payload: unknown, token: string, headers: Record<string, string> = {}) {
  return send(url, JSON.stringify(payload), {
    headers: { 'x-gitlab-event': 'Push Hook', 'x-gitlab-token': token, 'idempotency-key': randomBytes(16).toString('hex'), ...headers },
  });
}

export async function getDeployment(h: Harness, id: string): Promise<Record<string, unknown>> {
  const res = await send(h.url, '', { method: 'GET', path: `/deployments/${id}`, headers: { authorization: `Bearer ${h.adminToken}` } });
  if (res.status !== 200) throw new Error(`GET /deployments/${id} answered ${res.status}`);
  return res.json;
}

/** Wait until the deployment reaches a final state. */
export function waitForDeployment(h: Harness, id: string, timeoutMs = 20_000): Promise<Record<string, unknown>> {
  return eventually(`deployment ${id} to finish`, async () => {
    const deployment = await getDeployment(h, id);
    // Thrown, so that a timeout names the state it was left in.
    if (['queued', 'running'].includes(String(deployment.state))) throw new Error(`deployment ${id} still ${String(deployment.state)}`);
    return deployment;
  }, timeoutMs);
}

/** Wait until no deploy is running or waiting. */
export async function waitIdle(h: Harness, timeoutMs = 20_000): Promise<void> {
  await eventually('no deploy to be running or waiting', () => {
    const { running, waiting } = h.server.deployer.activity();
    if (running.length > 0 || waiting.length > 0) throw new Error(`deploys still active: ${running.length} running, ${waiting.length} waiting`);
    return true;
  }, timeoutMs, 25);
}
