import { describe, expect, it } from 'vitest';
import { AppError } from '../../shared/errors.js';
import { MAX_FILTER_LENGTH, parseCql2Json, parseCql2Text } from '../src/ogcapi/cql2.js';

/** The CQL2 parser alone: what it reads, and where it says a filter is wrong. */
function failure(parse: () => unknown): { detail: string; field: string } {
  try {
    parse();
  } catch (error) {
    expect(error).toBeInstanceOf(AppError);
    const e = error as AppError;
    expect(e.statusCode).toBe(400);
    return { detail: e.message, field: e.fields![0]!.field };
  }
  throw new Error('expected the filter to be refused');
}

describe('CQL2 text', () => {
  it('reads precedence as CQL2 defines it: NOT before AND before OR', () => {
    expect(parseCql2Text("a = 1 OR NOT b = 'x' AND c IS NULL")).toEqual({
      kind: 'or',
      args: [
        { kind: 'compare', op: '=', left: { kind: 'property', name: 'a' }, right: { kind: 'number', value: 1 } },
        {
          kind: 'and',
          args: [
            { kind: 'not', arg: { kind: 'compare', op: '=', left: { kind: 'property', name: 'b' }, right: { kind: 'string', value: 'x' } } },
            { kind: 'isNull', value: { kind: 'property', name: 'c' } },
          ],
        },
      ],
    });
  });

  it("reads a doubled quote inside a string as one quote (O'Brien), and keywords in any case", () => {
    expect(parseCql2Text("name = 'O''Brien' and version between -1 and 2.5e1")).toEqual({
      kind: 'and',
      args: [
        { kind: 'compare', op: '=', left: { kind: 'property', name: 'name' }, right: { kind: 'string', value: "O'Brien" } },
        { kind: 'between', value: { kind: 'property', name: 'version' }, low: { kind: 'number', value: -1 }, high: { kind: 'number', value: 25 } },
      ],
    });
  });

  it('reads WKT literals and BBOX into GeoJSON-shaped geometry', () => {
    expect(parseCql2Text('S_INTERSECTS(geometry, MULTIPOINT(1 2, 3 4))')).toMatchObject({ right: { kind: 'geometry', geometry: { type: 'MultiPoint', coordinates: [[1, 2], [3, 4]] } } });
    expect(parseCql2Text('s_intersects(geometry, bbox(1, 2, 3, 4))')).toMatchObject({ right: { kind: 'bbox', coords: [1, 2, 3, 4] } });
  });

  it.each([
    ["kategorie = = 'x'", 12, 'expected a property'],
    ["kategorie = 'x' AND (", 21, 'the end of the filter'],
    ["name = 'O''Brien' )", 18, 'after a complete expression'],
    ["name = 'offen", 7, 'unterminated string'],
    ['version ~ 2', 8, 'unexpected character'],
    ['accenti(name) = 1', 0, 'function accenti is not supported'],
    ["updatedAt > TIMESTAMP('gestern')", 22, 'not an RFC 3339 timestamp'],
    ['S_INTERSECTS(geometry, POLYGON((0 0, 1 0, 1 1, 0 0.5)))', 23, 'must be closed'],
    ['S_INTERSECTS(geometry, BBOX(1, 2, 3))', 23, 'BBOX takes 4'],
    ["updatedAt > TIMESTAMP('2026-02-30T00:00:00Z')", 22, 'not an RFC 3339 timestamp'],
    ["createdAt = DATE('0000-01-01')", 17, 'not a date'],
    ["name = 'a\u0000b'", 7, 'NUL'],
  ])('refuses %j with the position %i of the error', (filter, position, message) => {
    const { detail, field } = failure(() => parseCql2Text(filter));
    expect(detail).toContain(`at position ${position}`);
    expect(detail).toContain(message);
    expect(field).toBe(`filter@${position}`);
  });

  it('refuses filters longer than the limit and nesting deeper than it, without exhausting the stack', () => {
    expect(failure(() => parseCql2Text(`name = '${'x'.repeat(MAX_FILTER_LENGTH)}'`)).detail).toContain('longer than');
    expect(failure(() => parseCql2Text(`${'('.repeat(5000)}a = 1${')'.repeat(5000)}`)).detail).toContain('nested deeper');
    expect(failure(() => parseCql2Text(`${'NOT '.repeat(3000)}a = 1`)).detail).toContain('nested deeper');
  });
});

describe('CQL2 JSON', () => {
  it('reads the JSON encoding into the same tree as the text encoding', () => {
    const json = parseCql2Json(
      JSON.stringify({ op: 'and', args: [{ op: 'in', args: [{ property: 'kategorie' }, ['denkmal', 'friedhof']] }, { op: 's_intersects', args: [{ property: 'geometry' }, { bbox: [1, 2, 3, 4] }] }] }),
    );
    expect(json).toEqual(parseCql2Text("kategorie IN ('denkmal', 'friedhof') AND S_INTERSECTS(geometry, BBOX(1, 2, 3, 4))"));
  });

  it.each([
    ['{"op":"=","args":[{"property":"a"}', 'not JSON', 'filter@'],
    ['{"op":"near","args":[]}', 'not supported', 'filter/op'],
    ['{"op":"and","args":[true,{"op":"=","args":[1]}]}', 'takes 2 arguments', 'filter/args/1/args'],
    ['{"op":"=","args":[{"property":"a"},{"timestamp":"morgen"}]}', 'RFC 3339', 'filter/args/1'],
    ['{"op":"s_intersects","args":[{"property":"geometry"},{"type":"Polygon","coordinates":[[[0,0],[1,0],[0,0]]]}]}', 'at least 4 positions', 'filter/args/1/coordinates'],
  ])('refuses %s naming where (a JSON path or a position)', (filter, message, field) => {
    const refused = failure(() => parseCql2Json(filter));
    expect(refused.detail).toContain(message);
    expect(refused.field.startsWith(field)).toBe(true);
  });
});
