import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { HydraDouble } from '../../services/shared/testing/ory/hydra-double.js';
import { forwardTo, LateServers } from '../../test/helpers/late-servers.js';
import { freePort } from '../../services/shared/testing/ports.js';
import { lacks, requirements } from '../../test/helpers/requirements.js';

/**
 * The clients sync against a Hydra that is still starting, through real HTTP on loopback: the command
 * as the stack's clients-sync job runs it, in front of the contract-checked Hydra admin double.
 */

const MISSING = lacks('the client sync retry tests on the Hydra double', requirements.contracts());
const CLI = join(import.meta.dirname, '../src/clients/sync-cli.ts');

let hydra: HydraDouble;
const late = new LateServers();
const listen = late.listen.bind(late);
/** Passes a request on to the real double once the stand-in is done refusing. */
const forward = forwardTo(() => hydra.admin.url);

beforeAll(async () => {
  if (MISSING) return;
  hydra = await new HydraDouble({ loginUrl: 'http://x/login', consentUrl: 'http://x/consent', logoutUrl: 'http://x/logout', postLogoutRedirect: 'http://x/' }).start();
});
afterAll(async () => {
  if (MISSING) return;
  await hydra.close();
});
afterEach(async () => {
  await late.closeAll();
  if (!MISSING) expect(hydra.violations).toEqual([]);
});

function clientsFile(clientId: string): string {
  const file = join(mkdtempSync(join(tmpdir(), 'clients-retry-')), 'clients.yaml');
  writeFileSync(file, `clients:\n  - client_id: ${clientId}\n    client_name: Reports\n    redirect_uris:\n      - https://reports.example.org/cb\n`);
  return file;
}

interface Run {
  code: number;
  stdout: string;
  stderr: string;
  ms: number;
}

function sync(file: string, hydraAdminUrl: string, deadlineSeconds: number, onStderr?: (text: string) => void): Promise<Run> {
  const started = Date.now();
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--import', 'tsx', CLI, '--file', file], {
      env: { ...process.env, HYDRA_ADMIN_URL: hydraAdminUrl, CLIENTS_SYNC_DEADLINE_SECONDS: String(deadlineSeconds) },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString('utf8')));
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString('utf8');
      onStderr?.(stderr);
    });
    child.on('close', (code) => resolve({ code: code ?? -1, stdout, stderr, ms: Date.now() - started }));
  });
}

describe.skipIf(MISSING)('client sync against a Hydra that is still starting', () => {
  it('retries while connections are refused and Hydra answers 503, then creates the client and exits 0', async () => {
    const port = await freePort();
    const seen: number[] = [];
    // Nothing listens until the command has been refused twice; then Hydra answers 503 three times.
    let listening: Promise<number> | undefined;
    const running = sync(clientsFile('starting'), `http://127.0.0.1:${port}`, 30, (stderr) => {
      if (listening || (stderr.match(/no answer \(ECONNREFUSED\)/g) ?? []).length < 2) return;
      listening = listen((req, res) => {
        if (seen.length < 3) {
          seen.push(503);
          res.writeHead(503, { 'content-type': 'application/json' }).end('{"error":"temporarily_unavailable"}');
          return;
        }
        seen.push(200);
        forward(req, res);
      }, port);
    });
    const result = await running;
    expect(listening).toBeDefined();
    expect(result.stderr).toMatch(/clients-sync: Hydra not ready \(GET \/admin\/clients\/starting no answer \(ECONNREFUSED\)\); attempt 2 in \d+\.\d s/);
    expect(result.stderr).toMatch(/clients-sync: Hydra not ready \(GET \/admin\/clients\/starting answered 503/);
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toMatch(/^created {3}starting\n/);
    expect(seen.slice(0, 4)).toEqual([503, 503, 503, 200]);
    expect(hydra.clients.get('starting')?.redirect_uris).toEqual(['https://reports.example.org/cb']);
  });

  it('a 400 fails at once: one request, no retry, exit 1 naming the call and the answer', async () => {
    let requests = 0;
    const port = await listen((_req, res) => {
      requests++;
      res.writeHead(400, { 'content-type': 'application/json' }).end('{"error":"invalid_request","error_description":"The request is malformed"}');
    });
    const result = await sync(clientsFile('refused'), `http://127.0.0.1:${port}`, 30);
    expect(result.code).toBe(1);
    expect(requests).toBe(1);
    expect(result.stderr).not.toContain('not ready');
    expect(result.stderr.trim()).toBe(`clients-sync failed: Hydra admin API at http://127.0.0.1:${port} GET /admin/clients/refused answered 400: The request is malformed`);
  });

  it('gives up at CLIENTS_SYNC_DEADLINE_SECONDS when Hydra never answers, and exits 1 saying so', async () => {
    const port = await freePort();
    const result = await sync(clientsFile('never'), `http://127.0.0.1:${port}`, 2);
    expect(result.code).toBe(1);
    expect(result.ms).toBeLessThan(2_000 + 5_000);
    expect(result.stderr).toMatch(
      new RegExp(`clients-sync failed: Hydra admin API at http://127\\.0\\.0\\.1:${port} did not answer within CLIENTS_SYNC_DEADLINE_SECONDS=2 \\(\\d+ attempts in \\d+\\.\\d s; last: GET /admin/clients/never no answer \\(ECONNREFUSED\\)\\)`),
    );
  });
});
