import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../test/helpers/db.js';
import { issueOpaqueToken } from '../../test/doubles/ory/code-flow.js';
import { HydraDouble } from '../../services/shared/testing/ory/hydra-double.js';
import { lacks, requirements } from '../../test/helpers/requirements.js';
import { KratosDouble } from '../../services/shared/testing/ory/kratos-double.js';
import { freePort } from '../../services/shared/testing/ports.js';
import { assembleImage, type AssembledImage } from '../docker/image.js';
import { startApiProcess, type ApiProcess } from '../testing/api-process.js';
import { declaredContainer, declareDockerUnderMocks, resolved, reveal, type RegisteredResource } from '../testing/pulumi-mocks.js';

/**
 * The stack's one-shot jobs run as real processes with exactly the command and environment the Pulumi
 * program declares for them (read from the program under the runtime mocks). Only what a Docker
 * network would resolve is mapped: the database URL to a test database, Hydra's admin URL to the
 * contract-checked double, an uploaded file to a temporary file.
 */

const REPO_ROOT = join(import.meta.dirname, '..', '..');
let registered: RegisteredResource[];
let workDir: string;

beforeAll(async () => {
  const declaredStack = await declareDockerUnderMocks();
  registered = declaredStack.registered;
  await resolved(declaredStack.program.stack.jobs.clientsSync.id);
  workDir = mkdtempSync(join(tmpdir(), 'stack-jobs-'));
});
afterAll(() => rmSync(workDir, { recursive: true, force: true }));

function declared(name: string) {
  const { inputs, env } = declaredContainer(registered, name);
  const uploads = (reveal(inputs.uploads) as { file: string; content: string }[] | undefined) ?? [];
  return { env, command: reveal(inputs.command) as string[], uploads, image: imageOf(String(reveal(inputs.image))) };
}

/** The container's project image, its file set assembled as its Dockerfile does (infra/docker/image.ts). */
const assembled = new Map<string, AssembledImage>();
function imageOf(imageName: string): AssembledImage {
  const build = registered.find((r) => r.type === 'docker:index/image:Image' && reveal(r.inputs.imageName) === imageName);
  if (!build) throw new Error(`${imageName} is not a project image`);
  const dockerfile = (reveal(build.inputs.build) as { dockerfile: string }).dockerfile;
  if (!assembled.has(dockerfile)) assembled.set(dockerfile, assembleImage(dockerfile, { repoRoot: REPO_ROOT, into: join(workDir, `image-${assembled.size}`) }));
  return assembled.get(dockerfile)!;
}

/** Run a declared command (node …) in the container's image folder with the image's ENV and only the given environment. */
function runDeclared(command: string[], env: Record<string, string>, image: AssembledImage): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const [program, ...args] = command;
  expect(program).toBe('node');
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, { cwd: image.hostWorkdir, env: { ...image.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
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
    const first = await runDeclared(job.command, env, job.image);
    expect(first.stderr, first.stderr).not.toMatch(/configuration error/);
    expect(first.code, first.stdout + first.stderr).toBe(0);
    const { rows } = await db.pool.query<{ present: boolean }>("SELECT to_regclass('features.features') IS NOT NULL AS present");
    expect(rows[0]?.present).toBe(true);
    const second = await runDeclared(job.command, env, job.image);
    expect(second.code, second.stdout + second.stderr).toBe(0);
    expect(second.stdout).toContain('database already up to date');
  }, 120_000);
});

const hydraContracts = !lacks('the clients-sync job test', requirements.contracts());

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

    const first = await runDeclared(command, env, job.image);
    expect(first.code, first.stdout + first.stderr).toBe(0);
    expect(first.stdout.match(/client_secret \(shown once/g)?.length).toBe(1);
    for (const id of ['map-editor', 'field-app']) expect(hydra.clients.get(id)?.audience, id).toEqual(['geodata-api']);

    const second = await runDeclared(command, env, job.image);
    expect(second.code, second.stdout + second.stderr).toBe(0);
    expect(second.stdout).toBe('unchanged map-editor\nunchanged field-app\n');
    expect(hydra.violations).toEqual([]);
  }, 60_000);
});


describe.skipIf(!hydraContracts)('the API container', () => {
  let db: TestDatabase;
  let hydra: HydraDouble;
  let kratos: KratosDouble;
  let api: ApiProcess | undefined;
  let baseUrl: string;

  beforeAll(async () => {
    db = await createTestDatabase();
    hydra = await new HydraDouble({ loginUrl: 'http://auth.invalid/login', consentUrl: 'http://auth.invalid/consent', logoutUrl: 'http://auth.invalid/logout', postLogoutRedirect: 'http://auth.invalid/' }).start();
    kratos = await new KratosDouble({ loginUiUrl: 'http://auth.invalid/login', allowedReturnUrls: [] }).start();
    const declaredEnv = declared('api').env;
    const port = await freePort();
    // Exactly the declared environment; only what Docker's networks and volumes would resolve is mapped.
    const env = {
      ...declaredEnv,
      DATABASE_URL: db.url,
      HYDRA_ADMIN_URL: hydra.admin.url,
      KRATOS_PUBLIC_URL: kratos.public.url,
      KRATOS_ADMIN_URL: kratos.admin.url,
      PORT: String(port),
      DATA_DIR: join(workDir, 'api-data'),
    };
    expect(Object.keys(env).sort()).toEqual(Object.keys(declaredEnv).sort());
    // The image's command (infra/docker/api.Dockerfile CMD) in the image's file set, with its ENV under the declared one.
    const image = declared('api').image;
    expect(image.cmd[0]).toBe('node');
    api = await startApiProcess(image.cmd.slice(1), { cwd: image.hostWorkdir, env: { ...image.env, ...env }, port });
    baseUrl = api.url;
  }, 180_000);
  afterAll(async () => {
    await api?.stop();
    await Promise.all([hydra?.close(), kratos?.close(), db?.close()]);
  });

  it('accepts an opaque access token granted for its audience, with the role of the token session', async () => {
    // An admin's session with a second factor (the consent step puts acr into the token): /api/users wants AAL2 for admins.
    const token = await issueOpaqueToken(hydra, 'user-admin', { role: 'admin', acr: 'aal2', amr: ['pwd', 'totp'] }, ['geodata-api']);
    expect(token).toMatch(/^ory_at_/);
    const response = await fetch(`${baseUrl}/api/users`, { headers: { authorization: `Bearer ${token}` } });
    expect(response.status, api?.output()).toBe(200);
    expect(hydra.admin.count('introspectOAuth2Token')).toBeGreaterThanOrEqual(1);
  });

  it('refuses an opaque token granted without the API\'s audience, and any JWT', async () => {
    const token = await issueOpaqueToken(hydra, 'user-admin', { role: 'admin' }, []);
    expect((await fetch(`${baseUrl}/api/users`, { headers: { authorization: `Bearer ${token}` } })).status).toBe(401);
    const jwtShaped = `${Buffer.from('{"alg":"RS256"}').toString('base64url')}.${Buffer.from('{"sub":"x","role":"admin"}').toString('base64url')}.c2ln`;
    expect((await fetch(`${baseUrl}/api/users`, { headers: { authorization: `Bearer ${jwtShaped}` } })).status).toBe(401);
    expect(hydra.violations).toEqual([]);
  });
});
