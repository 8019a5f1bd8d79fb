/**
 * The doubles must be strict, or the exporter tests could pass against a server that accepts
 * anything. These tests send what a buggy client would send and expect the real API's refusal.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startMediaWikiDouble, type MediaWikiDouble } from '../../services/shared/testing/mediawiki-api.js';
import { startOsmApiDouble, type OsmApiDouble } from '../../services/shared/testing/osm-api.js';
import { startOverpassDouble, type OverpassDouble } from './overpass.js';

const UA = { 'user-agent': 'doubles-test/1.0' };

describe('OSM API double', () => {
  let osm: OsmApiDouble;
  beforeAll(async () => {
    osm = await startOsmApiDouble({ users: { a: { uid: 1, displayName: 'a' }, b: { uid: 2, displayName: 'b' } } });
  });
  afterAll(() => osm.close());

  const call = async (method: string, path: string, token: string | null, body?: string) => {
    const headers: Record<string, string> = { ...UA, 'content-type': 'text/xml' };
    if (token) headers.authorization = `Bearer ${token}`;
    const response = await fetch(`${osm.url}/api/0.6${path}`, { method, headers, ...(body ? { body } : {}) });
    return { status: response.status, text: await response.text() };
  };
  const openChangeset = async (token = 'a') => Number((await call('PUT', '/changeset/create', token, '<osm><changeset><tag k="comment" v="t"/></changeset></osm>')).text);
  const upload = (cs: number, inner: string, token = 'a') => call('POST', `/changeset/${cs}/upload`, token, `<osmChange version="0.6">${inner}</osmChange>`);

  it('needs a token and an identifying User-Agent', async () => {
    expect((await call('PUT', '/changeset/create', null, '<osm><changeset/></osm>')).status).toBe(401);
    const anonymous = await fetch(`${osm.url}/api/0.6/changeset/create`, { method: 'PUT', headers: { authorization: 'Bearer a', 'content-type': 'text/xml', 'user-agent': '' }, body: '<osm><changeset/></osm>' });
    expect(anonymous.status).toBe(403);
  });

  it('creates with placeholders and answers a diffResult', async () => {
    const cs = await openChangeset();
    const answer = await upload(cs, `<create><node id="-1" changeset="${cs}" lat="1" lon="2"/><way id="-2" changeset="${cs}"><nd ref="-1"/><tag k="a" v="b"/></way></create>`);
    expect(answer.status).toBe(200);
    expect(answer.text).toMatch(/<node old_id="-1" new_id="\d+" new_version="1"\/><way old_id="-2" new_id="\d+" new_version="1"\/>/);
  });

  it.each([
    ['an unknown placeholder', (cs: number) => `<create><way id="-1" changeset="${cs}"><nd ref="-9"/></way></create>`, 400, /Placeholder node not found/],
    ['a wrong changeset attribute', (cs: number) => `<create><node id="-1" changeset="${cs + 1}" lat="1" lon="1"/></create>`, 409, /Changeset mismatch/],
    ['a boolean attribute (not XML)', (cs: number) => `<delete if-unused><node id="1" changeset="${cs}" version="1"/></delete>`, 400, /Cannot parse/],
    ['a positive id on create', (cs: number) => `<create><node id="5" changeset="${cs}" lat="1" lon="1"/></create>`, 400, /negative placeholder/],
    ['a missing node position', (cs: number) => `<create><node id="-1" changeset="${cs}"/></create>`, 400, /latitude/],
    ['an unknown action', (cs: number) => `<update><node id="-1" changeset="${cs}" lat="1" lon="1"/></update>`, 400, /Unknown action/],
    ['duplicate tag keys', (cs: number) => `<create><node id="-1" changeset="${cs}" lat="1" lon="1"><tag k="a" v="1"/><tag k="a" v="2"/></node></create>`, 400, /duplicate tags/],
  ])('refuses %s', async (_name, body, status, message) => {
    const cs = await openChangeset();
    const answer = await upload(cs, body(cs));
    expect(answer.status).toBe(status);
    expect(answer.text).toMatch(message);
  });

  it('refuses stale versions (409), deleting a used node (412) unless if-unused, and is atomic', async () => {
    const cs = await openChangeset();
    const created = await upload(cs, `<create><node id="-1" changeset="${cs}" lat="1" lon="1"/><way id="-2" changeset="${cs}"><nd ref="-1"/></way></create>`);
    const nodeId = Number(/<node old_id="-1" new_id="(\d+)"/.exec(created.text)![1]);
    const stale = await upload(cs, `<create><node id="-5" changeset="${cs}" lat="3" lon="3"/></create><modify><node id="${nodeId}" changeset="${cs}" version="7" lat="2" lon="2"/></modify>`);
    expect(stale).toEqual({ status: 409, text: `Version mismatch: Provided 7, server had: 1 of Node ${nodeId}` });
    expect(osm.visible('node').some((n) => n.lat === 3)).toBe(false); // nothing of the failed upload was applied
    expect((await upload(cs, `<delete><node id="${nodeId}" changeset="${cs}" version="1"/></delete>`)).status).toBe(412);
    const ifUnused = await upload(cs, `<delete if-unused="true"><node id="${nodeId}" changeset="${cs}" version="1"/></delete>`);
    expect(ifUnused.text).toContain(`<node old_id="${nodeId}" new_id="${nodeId}" new_version="1"/>`);
    expect(osm.element('node', nodeId)!.visible).toBe(true);
  });

  it('refuses uploads into a closed or foreign changeset', async () => {
    const cs = await openChangeset();
    expect((await upload(cs, `<create><node id="-1" changeset="${cs}" lat="1" lon="1"/></create>`, 'b')).text).toBe("The user doesn't own that changeset");
    expect((await call('PUT', `/changeset/${cs}/close`, 'a')).status).toBe(200);
    const closed = await upload(cs, `<create><node id="-1" changeset="${cs}" lat="1" lon="1"/></create>`);
    expect(closed.status).toBe(409);
    expect(closed.text).toMatch(/was closed at/);
    expect((await call('PUT', `/changeset/${cs}/close`, 'a')).status).toBe(409);
  });
});

describe('MediaWiki action API double', () => {
  let wiki: MediaWikiDouble;
  beforeAll(async () => {
    wiki = await startMediaWikiDouble();
  });
  afterAll(() => wiki.close());

  const api = async (params: Record<string, string>, init: { method?: string; bearer?: string; form?: Record<string, string> } = {}) => {
    const headers: Record<string, string> = { ...UA };
    if (init.bearer) headers.authorization = `Bearer ${init.bearer}`;
    if (init.form) headers['content-type'] = 'application/x-www-form-urlencoded';
    const response = await fetch(`${wiki.url}/w/api.php?${new URLSearchParams({ ...params, format: 'json' }).toString()}`, {
      method: init.method ?? (init.form ? 'POST' : 'GET'),
      headers,
      ...(init.form ? { body: new URLSearchParams(init.form).toString() } : {}),
    });
    return (await response.json()) as Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
  };
  const token = async () => (await api({ action: 'query', meta: 'tokens', type: 'csrf' }, { bearer: 'wiki-oauth2-token' })).query.tokens.csrftoken as string;
  const create = async (data: unknown, extra: Record<string, string> = {}) =>
    api({ action: 'wbeditentity' }, { bearer: 'wiki-oauth2-token', form: { new: 'item', data: JSON.stringify(data), token: await token(), assert: 'user', ...extra } });
  const coordinate = (v: Record<string, unknown>) => ({ P625: [{ type: 'statement', rank: 'normal', mainsnak: { snaktype: 'value', property: 'P625', datavalue: { type: 'globecoordinate', value: v } } }] });

  it('refuses GET for edits, unknown parameters, bad tokens and anonymous asserts', async () => {
    expect((await api({ action: 'wbeditentity', new: 'item' })).error.code).toBe('mustbeposted');
    expect((await create({ labels: {} }, { summery: 'typo' })).error.code).toBe('unknownparam');
    expect((await api({ action: 'wbeditentity' }, { bearer: 'wiki-oauth2-token', form: { new: 'item', data: '{}', token: 'wrong+\\' } })).error.code).toBe('badtoken');
    expect((await api({ action: 'query', meta: 'tokens', type: 'csrf' })).query.tokens.csrftoken).toBe('+\\');
    expect((await api({ action: 'query', meta: 'tokens', type: 'csrf' }, { bearer: 'stolen' })).error.code).toBe('mwoauth-invalid-authorization');
  });

  it('checks references like main snaks, answers geosearch and haswbstatement, and refuses for lag as MediaWiki does', async () => {
    const url = (v: string) => ({ snaktype: 'value', property: 'P854', datavalue: { type: 'string', value: v } });
    const withReference = (snaks: unknown) => ({ P625: [{ ...coordinate({ latitude: 51.3, longitude: 12.4, precision: 0.001, globe: 'http://www.wikidata.org/entity/Q2' }).P625[0], references: [{ snaks }] }] });
    expect((await create({ claims: withReference([url('not a url')]) })).error.code).toBe('modification-failed');
    const created = await create({ claims: withReference({ P854: [url('https://example.org/f/1')] }) });
    expect(created.success).toBe(1);
    const near = await api({ action: 'query', list: 'geosearch', gscoord: '51.3001|12.4001', gsradius: '100', gslimit: '10' });
    expect(near.query.geosearch).toEqual(expect.arrayContaining([expect.objectContaining({ title: `Item:${created.entity.id}`, lat: 51.3, lon: 12.4 })]));
    expect((await api({ action: 'query', list: 'geosearch', gscoord: '51.3|12.4', gsradius: '20000' })).error.code).toBe('outofrange');
    expect((await api({ action: 'query', list: 'search', srsearch: 'haswbstatement:P402=1' })).query.search).toEqual([]);
    wiki.setLag(7, 1, 5);
    const lagged = await fetch(`${wiki.url}/w/api.php?${new URLSearchParams({ action: 'query', meta: 'userinfo', maxlag: '5', format: 'json' })}`, { headers: UA });
    expect(lagged.headers.get('retry-after')).toBe('5');
    expect(lagged.headers.get('x-database-lag')).toBe('7');
    expect(((await lagged.json()) as { error: { code: string; lag: number } }).error).toMatchObject({ code: 'maxlag', lag: 7 });
    expect((await api({ action: 'query', meta: 'userinfo', maxlag: '5' })).query.userinfo).toBeDefined();
  });

  it('checks statements against property datatypes and referenced items', async () => {
    const wrongType = { P31: [{ type: 'statement', rank: 'normal', mainsnak: { snaktype: 'value', property: 'P31', datavalue: { type: 'string', value: 'Q39614' } } }] };
    expect((await create({ claims: wrongType })).error.code).toBe('modification-failed');
    const missingItem = { P31: [{ type: 'statement', rank: 'normal', mainsnak: { snaktype: 'value', property: 'P31', datavalue: { type: 'wikibase-entityid', value: { id: 'Q999999', 'entity-type': 'item' } } } }] };
    expect((await create({ claims: missingItem })).error.info).toMatch(/no-such-entity/);
    expect((await create({ claims: coordinate({ latitude: 1, longitude: 2 }) })).error.code).toBe('modification-failed');
    const ok = await create({ labels: { de: { language: 'de', value: 'X' } }, claims: coordinate({ latitude: 1, longitude: 2, precision: 0.001, globe: 'http://www.wikidata.org/entity/Q2' }) });
    expect(ok.success).toBe(1);
    expect(ok.entity.id).toMatch(/^Q\d+$/);
  });
});

describe('Overpass double and the OSM map call', () => {
  let osm: OsmApiDouble;
  let overpass: OverpassDouble;
  beforeAll(async () => {
    osm = await startOsmApiDouble();
    overpass = await startOverpassDouble(osm);
    osm.seed(`<osm version="0.6"><node id="1" version="1" lat="51.30" lon="12.30"/><node id="2" version="1" lat="51.30" lon="12.31"/><node id="3" version="1" lat="51.31" lon="12.31"/>
      <node id="4" version="1" lat="51.305" lon="12.305"><tag k="historic" v="memorial"/><tag k="name" v="Stein"/></node>
      <way id="10" version="2"><nd ref="1"/><nd ref="2"/><nd ref="3"/><nd ref="1"/><tag k="landuse" v="cemetery"/><tag k="name" v="Friedhof"/></way></osm>`);
  });
  afterAll(async () => {
    await Promise.all([osm.close(), overpass.close()]);
  });
  const query = '[out:json][timeout:25][bbox:51.299,12.299,51.3005,12.3005];\n(\n  nwr["landuse"="cemetery"];\n  nwr["historic"~"^(memorial|monument)$"];\n);\nout body geom;';

  it('answers the form field data (POST) and the data parameter (GET) in Overpass JSON, with way geometry', async () => {
    const post = await fetch(`${overpass.url}/api/interpreter`, { method: 'POST', headers: { ...UA, 'content-type': 'application/x-www-form-urlencoded' }, body: new URLSearchParams({ data: query }).toString() });
    expect(post.headers.get('content-type')).toMatch(/^application\/json/);
    const body = (await post.json()) as { version: number; generator: string; osm3s: { copyright: string }; elements: Record<string, unknown>[] };
    expect(body).toMatchObject({ version: 0.6, osm3s: { copyright: expect.stringContaining('ODbL') } });
    // The way crosses the box with a node in it; the memorial lies outside the box.
    expect(body.elements).toEqual([{ type: 'way', id: 10, bounds: { minlat: 51.3, minlon: 12.3, maxlat: 51.31, maxlon: 12.31 }, nodes: [1, 2, 3, 1], geometry: [{ lat: 51.3, lon: 12.3 }, { lat: 51.3, lon: 12.31 }, { lat: 51.31, lon: 12.31 }, { lat: 51.3, lon: 12.3 }], tags: { landuse: 'cemetery', name: 'Friedhof' } }]);
    const get = await fetch(`${overpass.url}/api/interpreter?${new URLSearchParams({ data: query.replace('51.3005,12.3005', '51.306,12.306') })}`, { headers: UA });
    expect(((await get.json()) as { elements: { type: string; id: number }[] }).elements.map((e) => `${e.type}/${e.id}`)).toEqual(['node/4', 'way/10']);
  });

  it('answers a query it cannot parse with 400 and Overpass\' HTML error page', async () => {
    const bad = await fetch(`${overpass.url}/api/interpreter`, { method: 'POST', headers: { ...UA, 'content-type': 'application/x-www-form-urlencoded' }, body: new URLSearchParams({ data: 'node(1);out;' }).toString() });
    expect(bad.status).toBe(400);
    expect(await bad.text()).toMatch(/<strong style="color:#FF0000">Error<\/strong>: line 1: parse error/);
    expect((await fetch(`${overpass.url}/api/interpreter`, { method: 'POST', headers: UA, body: '' })).status).toBe(400);
  });

  it('the map call returns the nodes in the box, their ways with all nodes, and refuses malformed or large boxes', async () => {
    const map = await fetch(`${osm.url}/api/0.6/map?bbox=12.2995,51.2995,12.3005,51.3005`, { headers: UA });
    const xml = await map.text();
    expect(map.status).toBe(200);
    expect(xml.match(/<node id="\d+"/g)).toHaveLength(3);
    expect(xml).toContain('<way id="10"');
    expect((await fetch(`${osm.url}/api/0.6/map?bbox=1,2,3`, { headers: UA })).status).toBe(400);
    expect((await fetch(`${osm.url}/api/0.6/map?bbox=12,51,13,52`, { headers: UA })).status).toBe(400);
  });
});
