import { describe, expect, it } from 'vitest';
import { addressTags } from '../src/exports/address.js';
import { InvalidGeometryError, assertExportableGeometry, centroidOf } from '../src/exports/geometry.js';

describe('centroid for P625', () => {
  it('of a point is the point', () => {
    expect(centroidOf({ type: 'Point', coordinates: [13.4, 52.5] })).toEqual({ longitude: 13.4, latitude: 52.5 });
  });

  it('of a square is its middle, whatever the winding', () => {
    const ring: [number, number][] = [[0, 0], [2, 0], [2, 2], [0, 2], [0, 0]];
    expect(centroidOf({ type: 'Polygon', coordinates: [ring] })).toEqual({ longitude: 1, latitude: 1 });
    expect(centroidOf({ type: 'Polygon', coordinates: [[...ring].reverse()] })).toEqual({ longitude: 1, latitude: 1 });
  });

  it('subtracts holes and weights polygons by area', () => {
    const outer: [number, number][] = [[0, 0], [4, 0], [4, 4], [0, 4], [0, 0]];
    const hole: [number, number][] = [[2, 0], [4, 0], [4, 4], [2, 4], [2, 0]];
    const c = centroidOf({ type: 'Polygon', coordinates: [outer, hole] });
    expect(c.longitude).toBeCloseTo(1, 10);
    expect(c.latitude).toBeCloseTo(2, 10);
    const small: [number, number][] = [[10, 0], [11, 0], [11, 1], [10, 1], [10, 0]];
    const m = centroidOf({ type: 'MultiPolygon', coordinates: [[outer], [small]] });
    expect(m.longitude).toBeCloseTo((16 * 2 + 1 * 10.5) / 17, 10);
  });

  it('of a line is the length-weighted middle', () => {
    expect(centroidOf({ type: 'LineString', coordinates: [[0, 0], [2, 0], [2, 1]] })).toEqual({ longitude: (1 * 2 + 2 * 1) / 3, latitude: 0.5 / 3 });
  });
});

describe('exportable geometry', () => {
  it('refuses unclosed rings, short lines and positions outside EPSG:4326', () => {
    expect(() => assertExportableGeometry({ type: 'LineString', coordinates: [[0, 0]] })).toThrow(InvalidGeometryError);
    expect(() => assertExportableGeometry({ type: 'Point', coordinates: [200, 0] })).toThrow(/outside EPSG:4326/);
    expect(() => assertExportableGeometry({ type: 'Polygon', coordinates: [[[0, 0], [1, 0], [1, 1], [0, 0.5]]] })).toThrow(/not closed/);
  });
});

describe('address → addr:* tags', () => {
  it.each([
    ['Pariser Platz 1, 10117 Berlin', { 'addr:street': 'Pariser Platz', 'addr:housenumber': '1', 'addr:postcode': '10117', 'addr:city': 'Berlin' }],
    ['Straße des 17. Juni 135, 10623 Berlin', { 'addr:street': 'Straße des 17. Juni', 'addr:housenumber': '135', 'addr:postcode': '10623', 'addr:city': 'Berlin' }],
    ['Hauptstr. 12 a,  01067  Dresden', { 'addr:street': 'Hauptstr.', 'addr:housenumber': '12a', 'addr:postcode': '01067', 'addr:city': 'Dresden' }],
    ['Am Markt 3-5, 04109 Leipzig', { 'addr:street': 'Am Markt', 'addr:housenumber': '3-5', 'addr:postcode': '04109', 'addr:city': 'Leipzig' }],
  ])('%s is split into its parts', (input, tags) => {
    expect(addressTags(input)).toEqual(tags);
  });

  it.each(['Am Friedhof', 'Hinter der Kirche, Dresden', '12345 Berlin', 'Weg 1, 1234 Wien'])('%s is kept whole in addr:full', (input) => {
    expect(addressTags(input)).toEqual({ 'addr:full': input });
  });

  it('no address, no tags', () => {
    expect(addressTags(null)).toEqual({});
    expect(addressTags('   ')).toEqual({});
  });
});
