import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../test/helpers/db.js';
import { HYDRA_SPEC, HydraDouble } from '../test/doubles/ory/hydra-double.js';
import { exampleConfig, installMocks, reveal, type RegisteredResource } from './testing/pulumi-mocks.js';

/**
 * The stack's one-shot jobs run as real processes with exactly the command and environment the Pulumi
 * program declares for them (read from the program under the runtime mocks). Only what a Docker
 * network would resolve is mapped: the database URL to a test database, Hydra's admin URL to the
 * contract-checked double, an uploaded file to a temporary file.
 */

const REPO_ROOT = join(import.meta.dirname, '..');
const CONTAINER = 'docker:index/container:Container';
let registered: RegisteredResource[];
let workDir: string;

beforeAll(async () => {
  registered = await installMocks({ config: { ...exampleConfig(), smtpConnectionUri: 'smtp://mail.example.org:25/' }, secretKeys: ['smtpConnectionUri'] });
  const program = await import('./program.js');
  await new Promise<void>((resolve) => program.stack.jobs.clientsSync.id.apply(() => resolve()));
  workDir = mkdtempSync(join(tmpdir(), 'stack-jobs-'));
});
afterAll(() => rmSync(workDir, { recursive: true, force: true }));

function declared(name: string) {
  const found = registered.find((r) => r.type === CONTAINER && r.name === name);
  if (!found) throw new Error(`the program declares no container ${name}`);
  const envs = (reveal(found.inputs.envs) as string[]).map((e) => [e.slice(0, e.indexOf('=')), e.slice(e.indexOf('=') + 1)] as const);
  const uploads = (reveal(found.inputs.uploads) as { file: string; content: string }[] | undefined) ?? [];
  return { env: Object.fromEntries(envs), command: reveal(found.inputs.command) as string[], uploads };
}

/** Run a declared command (node …) from the repository root with only the given environment. */
function runDeclared(command: string[], env: Record<string, string>): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const [program, ...args] = command;
  expect(program).toBe('node');
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, { cwd: REPO_ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.once('error', reject);
    child.once('exit', (code) => resolve({ code, stdout, stderr }));
  });
}

describe('the api-migrate job', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase({ migrate: false });
  });
  afterAll(async () => {
    await db?.close();
  });

  it('gets only NODE_ENV=production and DATABASE_URL', () => {
    expect(Object.keys(declared('api-migrate').env).sort()).toEqual(['DATABASE_URL', 'NODE_ENV']);
  });

  it('migrates an empty database with exactly the environment the program gives it, and a second run is a no-op', async () => {
    const job = declared('api-migrate');
    expect(job.env.DATABASE_URL).toMatch(/^postgres:\/\/features:[^@]+@features-db:5432\/features$/);
    const env = { ...job.env, DATABASE_URL: db.url };
    const first = await runDeclared(job.command, env);
    expect(first.stderr, first.stderr).not.toMatch(/configuration error/);
    expect(first.code, first.stdout + first.stderr).toBe(0);
    const { rows } = await db.pool.query<{ present: boolean }>("SELECT to_regclass('features.features') IS NOT NULL AS present");
    expect(rows[0]?.present).toBe(true);
    const second = await runDeclared(job.command, env);
    expect(second.code, second.stdout + second.stderr).toBe(0);
    expect(second.stdout).toContain('database already up to date');
  }, 120_000);
});

const hydraContracts = existsSync(HYDRA_SPEC);
if (!hydraContracts) console.log(`skipping the clients-sync job test: the Hydra contract ${HYDRA_SPEC} is missing (get ../shared/vendor or set CONTRACTS_DIR)`);

describe.skipIf(!hydraContracts)('the clients-sync job', () => {
  let hydra: HydraDouble;
  beforeAll(async () => {
    hydra = await new HydraDouble({ loginUrl: 'https://auth.example.org/login', consentUrl: 'https://auth.example.org/consent', logoutUrl: 'https://auth.example.org/logout', postLogoutRedirect: 'https://main.sites.example.org' }).start();
  });
  afterAll(async () => {
    await hydra?.close();
  });

  it('gets only NODE_ENV and HYDRA_ADMIN_URL: the clients file comes rendered, with no placeholder left', () => {
    const job = declared('clients-sync');
    expect(Object.keys(job.env).sort()).toEqual(['HYDRA_ADMIN_URL', 'NODE_ENV']);
    const file = job.uploads.find((u) => u.file === job.command[job.command.indexOf('--file') + 1]);
    expect(file?.content).toBeDefined();
    expect(file?.content).not.toContain('${');
  });

  it('syncs the clients into Hydra with the API audience, shows a new secret once, and a second run changes nothing', async () => {
    const job = declared('clients-sync');
    const fileIndex = job.command.indexOf('--file') + 1;
    const upload = job.uploads.find((u) => u.file === job.command[fileIndex]);
    const clientsFile = join(workDir, 'clients.yaml');
    writeFileSync(clientsFile, upload?.content ?? '');
    const command = job.command.map((arg, i) => (i === fileIndex ? clientsFile : arg));
    const env = { ...job.env, HYDRA_ADMIN_URL: hydra.admin.url };

    const first = await runDeclared(command, env);
    expect(first.code, first.stdout + first.stderr).toBe(0);
    expect(first.stdout.match(/client_secret \(shown once/g)?.length).toBe(1);
    for (const id of ['map-editor', 'field-app']) expect(hydra.clients.get(id)?.audience, id).toEqual(['geodata-api']);

    const second = await runDeclared(command, env);
    expect(second.code, second.stdout + second.stderr).toBe(0);
    expect(second.stdout).toBe('unchanged map-editor\nunchanged field-app\n');
    expect(hydra.violations).toEqual([]);
  }, 60_000);
});
