import { AppError } from '../../../shared/errors.js';

/**
 * The coordinate reference systems of OGC API – Features Part 2. Features are stored in EPSG:4326
 * with longitude first (which is CRS84); PostGIS transforms them for the other systems.
 *
 * Axis order matters: EPSG:4326 as an OGC URI means latitude first, so coordinates in it are
 * flipped, while CRS84 is longitude first. The projected systems are easting, northing.
 */
export interface Crs {
  uri: string;
  srid: number;
  /** true when the CRS's first axis is latitude (coordinates are flipped against storage). */
  latitudeFirst: boolean;
  label: string;
}

export const CRS84: Crs = { uri: 'http://www.opengis.net/def/crs/OGC/1.3/CRS84', srid: 4326, latitudeFirst: false, label: 'WGS 84 longitude/latitude (storage)' };

export const SUPPORTED_CRS: readonly Crs[] = [
  CRS84,
  { uri: 'http://www.opengis.net/def/crs/EPSG/0/4326', srid: 4326, latitudeFirst: true, label: 'WGS 84 latitude/longitude' },
  { uri: 'http://www.opengis.net/def/crs/EPSG/0/25832', srid: 25832, latitudeFirst: false, label: 'ETRS89 / UTM zone 32N' },
  { uri: 'http://www.opengis.net/def/crs/EPSG/0/25833', srid: 25833, latitudeFirst: false, label: 'ETRS89 / UTM zone 33N' },
  { uri: 'http://www.opengis.net/def/crs/EPSG/0/3857', srid: 3857, latitudeFirst: false, label: 'WGS 84 / Pseudo-Mercator' },
];

/** Also accepted on input: the short forms people type (EPSG:25833, CRS84, [EPSG:25833] as a safe CURIE). */
function normalise(value: string): string {
  const v = value.trim().replace(/^\[(.*)\]$/, '$1');
  const epsg = /^EPSG:(\d+)$/i.exec(v);
  if (epsg) return `http://www.opengis.net/def/crs/EPSG/0/${epsg[1]}`;
  if (/^(OGC:)?CRS84$/i.test(v)) return CRS84.uri;
  return v.replace(/^https:/, 'http:');
}

export function parseCrs(value: string | undefined, parameter: string): Crs {
  if (value === undefined) return CRS84;
  const uri = normalise(value);
  const crs = SUPPORTED_CRS.find((c) => c.uri === uri);
  if (!crs) {
    throw new AppError('INVALID_QUERY', `invalid query: ${parameter}: ${value} is not supported; use one of ${SUPPORTED_CRS.map((c) => c.uri).join(', ')}`, {
      fields: [{ field: parameter, message: 'is not a supported CRS' }],
    });
  }
  return crs;
}

/** The Content-Crs header value (Part 2 /req/crs/ogc-crs-header-value): the URI in angle brackets. */
export function contentCrsHeader(crs: Crs): string {
  return `<${crs.uri}>`;
}
