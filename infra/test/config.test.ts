import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadTargets } from '../../services/shared/targets.js';
import { checkPreviewDomains, checkSitesSubnet } from '../config.js';
import { checkSecretValue, SECRET_SPECS } from '../secrets.js';
import { MAX_TARGETS, stackTargets, targetUids } from '../stack/targets.js';

const workDir = mkdtempSync(join(tmpdir(), 'infra-config-'));
afterAll(() => rmSync(workDir, { recursive: true, force: true }));

const shippedTargets = () => loadTargets(join(import.meta.dirname, '..', '..', 'config', 'targets.yaml'));

function targetsWithPreviewAt(domain: string) {
  const path = join(workDir, `targets-${domain}.yaml`);
  writeFileSync(path, readFileSync(join(import.meta.dirname, '..', '..', 'config', 'targets.yaml'), 'utf8').replace('de1.example-preview.net', domain));
  return loadTargets(path);
}

describe('preview domains', () => {
  it('the shipped targets put every preview site outside the cookie domain', () => {
    expect(() => checkPreviewDomains(shippedTargets(), 'example.org')).not.toThrow();
  });

  it('refuses a preview site under the session cookie domain, naming the target', () => {
    expect(() => checkPreviewDomains(targetsWithPreviewAt('de1.sites.example.org'), 'example.org')).toThrow(/preview site feature\/team-de1 \(de1\.sites\.example\.org\) lies within the session cookie domain example\.org/);
  });

  it('refuses a preview site on the cookie domain itself, or above it (it could set cookies for it)', () => {
    expect(() => checkPreviewDomains(targetsWithPreviewAt('EXAMPLE.org'), 'example.org')).toThrow(/within the session cookie domain/);
    expect(() => checkPreviewDomains(shippedTargets(), 'id.example-preview.net')).toThrow(/within the session cookie domain/);
  });

  it('refuses a preview site on a sibling of the cookie domain (same registrable domain: cookie tossing)', () => {
    expect(() => checkPreviewDomains(targetsWithPreviewAt('de1.previews.example.org'), 'sso.example.org')).toThrow(/within the session cookie domain sso\.example\.org/);
  });

  it('does not mistake a look-alike for a subdomain', () => {
    expect(() => checkPreviewDomains(targetsWithPreviewAt('de1.notexample.org'), 'example.org')).not.toThrow();
  });
});

describe('the sites subnet', () => {
  it('is refused inside an internal range, accepted outside', () => {
    expect(() => checkSitesSubnet('192.168.7.0/24', ['10.0.0.0/8', '192.168.0.0/16'])).toThrow(/192\.168\.0\.0\/16 overlaps the sites network/);
    expect(() => checkSitesSubnet('10.1.2.0/24', ['10.1.2.128/25'])).toThrow(/overlaps/);
    expect(() => checkSitesSubnet('172.30.1.0/24', ['10.0.0.0/8', '192.168.0.0/16'])).not.toThrow();
  });
});

describe('rotatable Ory secrets', () => {
  const cipher = SECRET_SPECS.kratosCipherSecret;
  const a32 = 'a'.repeat(32);
  const b32 = 'b'.repeat(32);

  it('a Kratos cipher secret may be several comma-separated values of exactly 32 characters (new,old)', () => {
    expect(() => checkSecretValue('kratosCipherSecret', cipher, a32)).not.toThrow();
    expect(() => checkSecretValue('kratosCipherSecret', cipher, `${a32},${b32}`)).not.toThrow();
  });

  it('refuses a cipher list with one value of another length, naming its position and never the value', () => {
    const call = () => checkSecretValue('kratosCipherSecret', cipher, `${a32},secret-old-31-characters-long-x`);
    expect(call).toThrow('config kratosCipherSecret (value 2 of 2) must be exactly 32 characters');
    try {
      call();
    } catch (error) {
      expect(String(error)).not.toContain('secret-old');
    }
    expect(() => checkSecretValue('kratosCipherSecret', cipher, `${a32},`)).toThrow(/value 2 of 2\) is empty/);
  });

  it('Hydra system secrets rotate the same way, each at least 32 characters', () => {
    expect(() => checkSecretValue('hydraSystemSecret', SECRET_SPECS.hydraSystemSecret, `${a32}xx,${b32}`)).not.toThrow();
    expect(() => checkSecretValue('hydraSystemSecret', SECRET_SPECS.hydraSystemSecret, `${a32},short`)).toThrow(/value 2 of 2\) must be at least 32/);
  });

  it('a non-rotatable secret is one value, commas included', () => {
    expect(() => checkSecretValue('loginCookieSecret', SECRET_SPECS.loginCookieSecret, `${'x'.repeat(20)},${'y'.repeat(20)}`)).not.toThrow();
  });
});

describe('the per-target boundaries', () => {
  it('give each target a /28 of sitesSubnet and uids of its own, derived from its deploy path, not its position', () => {
    const targets = shippedTargets();
    const declared = stackTargets(targets, '172.30.1.0/24');
    expect(declared.map((t) => t.siteSubnet)).toEqual(['172.30.1.0/28', '172.30.1.16/28', '172.30.1.32/28', '172.30.1.48/28', '172.30.1.64/28']);
    const reordered = stackTargets([...targets].reverse(), '172.30.1.0/24');
    for (const t of declared) expect(reordered.find((r) => r.target.key === t.target.key)).toMatchObject({ siteUid: t.siteUid, buildUid: t.buildUid });
    expect(targetUids('main')).toEqual({ siteUid: declared[0]!.siteUid, buildUid: declared[0]!.siteUid + 1 });
  });

  it(`refuse more than ${MAX_TARGETS} targets (a /24 holds ${MAX_TARGETS} site networks)`, () => {
    const one = shippedTargets()[0]!;
    const many = Array.from({ length: MAX_TARGETS + 1 }, (_, i) => ({ ...one, key: `t${i}`, deployPath: `t${i}`, port: 4000 + i, domain: `t${i}.example.org` }));
    expect(() => stackTargets(many, '172.30.1.0/24')).toThrow(/17 deploy targets; sitesSubnet \(a \/24\) holds the networks of at most 16/);
  });

  it('refuse two deploy paths whose uids collide, naming both', () => {
    const one = shippedTargets()[0]!;
    // Find a second path that lands on the same uid as "main" (the space is 15 000 slots).
    let other = '';
    for (let i = 0; i < 1_000_000 && !other; i++) if (targetUids(`p${i}`).siteUid === targetUids('main').siteUid) other = `p${i}`;
    expect(other).not.toBe('');
    expect(() => stackTargets([one, { ...one, key: 'x', deployPath: other, port: 4999, domain: 'x.example.org' }], '172.30.1.0/24')).toThrow(`deploy paths main and ${other} map to the same uids`);
  });
});
