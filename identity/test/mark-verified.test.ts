import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { Configuration, IdentityApi } from '@ory/kratos-client';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { markExistingAddressesVerified, nextPageToken } from '../src/accounts/mark-verified.js';
import { KratosDouble } from '../../services/shared/testing/ory/kratos-double.js';
import { lacks, requirements } from '../../test/helpers/requirements.js';

/**
 * Existing accounts are not locked out by the verified-e-mail rule: the operator marks the addresses of
 * identities created before the upgrade verified through Kratos' admin API (listIdentities, paged;
 * patchIdentity), checked against the vendored Kratos document. Newer accounts verify themselves.
 */
const MISSING = lacks('the mark-verified tests on the Kratos double', requirements.contracts());
const run = promisify(execFile);
const UPGRADE = new Date('2026-12-01T00:00:00Z');

describe.skipIf(MISSING)('marking existing addresses verified', () => {
  let kratos: KratosDouble;
  let identity: IdentityApi;
  beforeAll(async () => {
    kratos = await new KratosDouble({ loginUiUrl: 'http://127.0.0.1:9/login', allowedReturnUrls: [] }).start();
    identity = new IdentityApi(new Configuration({ basePath: kratos.admin.url }));
  });
  afterAll(async () => {
    await kratos?.close();
  });
  afterEach(() => {
    expect(kratos.violations).toEqual([]);
  });

  it('marks only identities created before the cut-off, across pages, and a second run changes nothing', async () => {
    const old = Array.from({ length: 5 }, (_, i) => kratos.addIdentity({ email: `old-${i}@example.org`, name: `Old ${i}`, password: 'x', verified: false, createdAt: Date.parse('2025-06-01T00:00:00Z') + i }));
    const alreadyVerified = kratos.addIdentity({ email: 'fine@example.org', name: 'Fine', password: 'x', createdAt: Date.parse('2025-01-01T00:00:00Z') });
    const fresh = kratos.addIdentity({ email: 'new@example.org', name: 'New', password: 'x', verified: false, createdAt: Date.parse('2026-12-02T00:00:00Z') });
    const lines: string[] = [];

    const dry = await markExistingAddressesVerified({ identity, createdBefore: UPGRADE, dryRun: true, pageSize: 2 });
    expect(dry).toEqual({ checked: 7, marked: 5 });
    expect(old.every((i) => i.verified === false)).toBe(true);

    const done = await markExistingAddressesVerified({ identity, createdBefore: UPGRADE, pageSize: 2, log: (l) => lines.push(l) });
    expect(done).toEqual({ checked: 7, marked: 5 });
    expect(old.every((i) => i.verified === true)).toBe(true);
    expect(alreadyVerified.verified).toBeUndefined();
    expect(fresh.verified).toBe(false);
    // The log names identities by id, never by address.
    expect(lines.join('\n')).not.toContain('@example.org');
    expect(await markExistingAddressesVerified({ identity, createdBefore: UPGRADE, pageSize: 2 })).toEqual({ checked: 7, marked: 0 });
    expect(kratos.admin.count('patchIdentity')).toBe(5);
  });

  it('follows Kratos\' Link header to the next page', () => {
    expect(nextPageToken('</admin/identities?page_size=2&page_token=abc>; rel="next", </admin/identities?page_size=2>; rel="first"')).toBe('abc');
    expect(nextPageToken('</admin/identities?page_size=2>; rel="first"')).toBeUndefined();
    expect(nextPageToken(undefined)).toBeUndefined();
  });

  it('the command needs --before and KRATOS_ADMIN_URL (exit 2), and runs with them (exit 0)', async () => {
    const cli = (args: string[], env: Record<string, string> = {}) =>
      run(process.execPath, ['--import', 'tsx', 'identity/src/accounts/mark-verified-cli.ts', ...args], { env: { PATH: process.env.PATH ?? '', ...env } }).then(
        (r) => ({ code: 0, out: r.stdout + r.stderr }),
        (e: { code: number; stdout: string; stderr: string }) => ({ code: e.code, out: e.stdout + e.stderr }),
      );
    expect((await cli([], { KRATOS_ADMIN_URL: kratos.admin.url })).code).toBe(2);
    expect((await cli(['--before', UPGRADE.toISOString()])).code).toBe(2);
    const ok = await cli(['--before', UPGRADE.toISOString(), '--dry-run'], { KRATOS_ADMIN_URL: kratos.admin.url });
    expect(ok.code).toBe(0);
    expect(ok.out).toMatch(/identities checked/);
  });
});
