import { describe, expect, it } from 'vitest';
import { loadWebConfig } from '../src/config.js';
import { pickLanguage } from '../src/i18n/index.js';
import { devTokenClaims, mayEdit, safeReturnPath } from '../src/lib/session.js';
import { preloadScript } from '../src/lib/first-view.js';

describe('the site’s runtime configuration', () => {
  it('offers the development sign-in in development only: NODE_ENV=production refuses it', () => {
    expect(loadWebConfig({}).devSignIn).toBe(true);
    expect(loadWebConfig({ NODE_ENV: 'production', DEV_SIGNIN: 'true' }).devSignIn).toBe(false);
    expect(loadWebConfig({ DEV_SIGNIN: 'false' }).devSignIn).toBe(false);
  });

  it('names the variable of a bad value', () => {
    expect(() => loadWebConfig({ API_PUBLIC_URL: 'ftp://x' })).toThrow(/API_PUBLIC_URL/);
  });

  it('reads the URLs at run time, so one build serves every target', () => {
    const config = loadWebConfig({ API_PUBLIC_URL: 'https://api.example.org/', WMS_URL: 'https://geo.example.org/wms', BASEMAP_URL: 'https://tiles.example.org/{z}/{x}/{y}.png' });
    expect(config).toMatchObject({ apiPublicUrl: 'https://api.example.org', apiUrl: 'https://api.example.org', wms: { url: 'https://geo.example.org/wms' } });
    // BASEMAP_URL is the first background map; WMS_URL also offers GeoServer as one (config/basemaps.yaml).
    expect(config.basemaps[0]).toMatchObject({ id: 'configured', type: 'xyz', url: 'https://tiles.example.org/{z}/{x}/{y}.png' });
    expect(config.basemaps.find((basemap) => basemap.id === 'geoserver')).toMatchObject({ type: 'wms', url: 'https://geo.example.org/wms' });
  });
});

describe('the language of a request', () => {
  it('is German by default, English by Accept-Language by quality, and an explicit choice wins', () => {
    expect(pickLanguage(undefined, undefined)).toBe('de');
    expect(pickLanguage(undefined, 'fr-FR, en-GB;q=0.8, de;q=0.5')).toBe('en');
    expect(pickLanguage(undefined, 'de;q=0.9, en;q=0.2')).toBe('de');
    expect(pickLanguage('de', 'en')).toBe('de');
    expect(pickLanguage('xx', 'en')).toBe('en');
  });
});

describe('sign-in helpers', () => {
  it('accepts only paths on this site as return URLs', () => {
    expect(safeReturnPath('/features/a/edit?x=1')).toBe('/features/a/edit?x=1');
    for (const hostile of ['//evil.example', 'https://evil.example/', '/\\evil.example', '', null]) expect(safeReturnPath(hostile)).toBe('/');
  });

  it('ignores an expired or malformed development token', () => {
    const token = (claims: object) => `x.${Buffer.from(JSON.stringify(claims)).toString('base64url')}.y`;
    expect(devTokenClaims(token({ sub: 'a', role: 'admin', exp: Date.now() / 1000 + 60 }))).toEqual({ sub: 'a', role: 'admin' });
    expect(devTokenClaims(token({ sub: 'a', role: 'admin', exp: Date.now() / 1000 - 1 }))).toBeUndefined();
    expect(devTokenClaims('garbage')).toBeUndefined();
    expect(devTokenClaims(token({ sub: 'a', role: 'root', exp: Date.now() / 1000 + 60 }))?.role).toBe('guest');
  });

  it('shows edit controls to the creator (update:own) and to admins only, and to nobody while the feature is in review', () => {
    const user = (role: 'guest' | 'contributor' | 'reviewer' | 'admin', id = 'alice') => ({ id, role, name: id, token: undefined });
    const byAlice = { createdBy: 'alice', status: 'draft' };
    expect(mayEdit(user('contributor'), byAlice)).toBe(true);
    expect(mayEdit(user('contributor', 'bert'), byAlice)).toBe(false);
    expect(mayEdit(user('reviewer', 'bert'), byAlice)).toBe(false);
    expect(mayEdit(user('admin', 'ada'), byAlice)).toBe(true);
    expect(mayEdit(user('guest'), byAlice)).toBe(false);
    expect(mayEdit(undefined, byAlice)).toBe(false);
    expect(mayEdit(user('contributor'), { ...byAlice, status: 'in_qc' })).toBe(false);
    expect(mayEdit(user('admin', 'ada'), { ...byAlice, status: 'in_qc' })).toBe(false);
    expect(mayEdit(user('contributor'), { ...byAlice, status: 'rejected' })).toBe(true);
  });
});

describe('the map page’s inline preload script (lib/first-view.ts preloadScript)', () => {
  /** Runs the script as the page would, against a document with one 800 × 600 map box. */
  function runPreload(script: string, search: string): string[] {
    const head: { href: string }[] = [];
    const document = {
      getElementById: (id: string) => (id === 'map' ? { clientWidth: 800, clientHeight: 600 } : null),
      createElement: () => ({ rel: '', as: '', crossOrigin: '', href: '' }),
      head: { append: (link: { href: string }) => head.push(link) },
    };
    new Function('document', 'location', script)(document, { search });
    return head.map((link) => link.href);
  }

  it('is written once per map and API URL, preloads the first view’s overview tiles, and cannot close its <script>', () => {
    const script = preloadScript('map', 'https://api.example.org');
    expect(preloadScript('map', 'https://api.example.org')).toBe(script);
    expect(preloadScript('map', 'https://other.example.org')).not.toBe(script);
    const urls = runPreload(script, '?center=13.4,52.52&zoom=9');
    expect(urls.length).toBeGreaterThan(0);
    for (const url of urls) expect(url).toMatch(/^https:\/\/api\.example\.org\/api\/tiles\/9\/\d+\/\d+\.mvt$/);
    expect(runPreload(script, '?center=13.4,52.52&zoom=16')).toEqual([]); // the detail view: no overview
    const hostile = preloadScript('map', 'https://x.example.org/</script><script>alert(1)</script>');
    expect(hostile).not.toContain('</script>');
    expect(runPreload(hostile, '?zoom=9')[0]).toContain('/</script><script>alert(1)</script>/api/tiles/9/');
  });
});
