import { spawn } from 'node:child_process';
import { createReadStream } from 'node:fs';
import { mkdtemp, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { AppError } from '../../../shared/errors.js';

/**
 * Reading an uploaded file of features with GDAL (`ogrinfo` and `ogr2ogr`, Debian's gdal-bin): every
 * format GDAL reads, and the four the import offers — GeoJSON, GeoPackage, CSV (coordinate columns or a
 * WKT column) and a zipped Shapefile — with GDAL's parsers, reprojection and encodings rather than ours.
 * GDAL runs as a child process on a temporary copy, so a large or hostile file costs the API's event
 * loop nothing but the reading of GDAL's output (one feature per line, GeoJSONSeq, in EPSG:4326), which
 * yields to other requests every CHUNK rows. Bounded: at most MAX_IMPORT_ROWS features, a GDAL run of at
 * most CONVERT_TIMEOUT_MS, and at most MAX_OUTPUT_BYTES of output read.
 */
export type ImportFormat = 'geojson' | 'gpkg' | 'csv' | 'shapefile';

export const MAX_IMPORT_ROWS = 20_000;
export const CONVERT_TIMEOUT_MS = 120_000;
const MAX_OUTPUT_BYTES = 256 * 1024 * 1024;
/** A line of GeoJSONSeq longer than this (one feature) is refused rather than parsed. */
const MAX_FEATURE_LINE = 8 * 1024 * 1024;
const CHUNK = 500;

export interface SourceRow {
  /** 1-based position in the file's first layer. */
  row: number;
  geometry: { type: string; coordinates?: unknown; geometries?: unknown } | null;
  attributes: Record<string, unknown>;
}

export interface ConvertedFile {
  format: ImportFormat;
  layer: string;
  /** Every attribute name of the layer, in the file's order. */
  fields: string[];
  rows: SourceRow[];
}

/** Format by file name, checked against the bytes (a GeoPackage is SQLite, a Shapefile arrives zipped). */
export function formatOf(filename: string, bytes: Buffer): ImportFormat {
  const extension = /\.([A-Za-z0-9]{1,10})$/.exec(filename)?.[1]?.toLowerCase();
  const format = ({ geojson: 'geojson', json: 'geojson', gpkg: 'gpkg', csv: 'csv', zip: 'shapefile' } as const)[extension ?? ''];
  if (!format) throw new AppError('UNSUPPORTED_MEDIA_TYPE', `cannot import ${filename.slice(0, 100)}: the file must be .geojson/.json, .gpkg, .csv or a zipped Shapefile (.zip)`);
  const magic = bytes.subarray(0, 16);
  if (format === 'gpkg' && !magic.toString('latin1').startsWith('SQLite format 3')) throw new AppError('VALIDATION_FAILED', 'the file is not a GeoPackage (no SQLite header)', { fields: [{ field: 'file', message: 'is not a GeoPackage' }] });
  if (format === 'shapefile' && !(magic[0] === 0x50 && magic[1] === 0x4b)) throw new AppError('VALIDATION_FAILED', 'the file is not a zip archive (a Shapefile is imported zipped: .shp, .shx, .dbf and .prj together)', { fields: [{ field: 'file', message: 'is not a zip archive' }] });
  return format;
}

let gdal: Promise<string | undefined> | undefined;
/** undefined when ogr2ogr runs here, else one line naming what is missing. */
export function missingGdal(): Promise<string | undefined> {
  return (gdal ??= run('ogr2ogr', ['--version'], 10_000).then(
    () => undefined,
    () => 'GDAL is not installed (ogr2ogr; Debian package gdal-bin)',
  ));
}

/** At most this many GDAL conversions at once; others wait their turn (each is a process and a CPU). */
const MAX_CONCURRENT = 2;
let running = 0;
const waiting: Array<() => void> = [];
async function slot<T>(work: () => Promise<T>): Promise<T> {
  if (running >= MAX_CONCURRENT) await new Promise<void>((resolve) => waiting.push(resolve));
  running++;
  try {
    return await work();
  } finally {
    running--;
    waiting.shift()?.();
  }
}

export async function convert(filename: string, bytes: Buffer): Promise<ConvertedFile> {
  const format = formatOf(filename, bytes);
  const missing = await missingGdal();
  if (missing) throw new AppError('SERVICE_UNAVAILABLE', `imports need GDAL on the API's machine: ${missing}`);
  return slot(async () => {
    const dir = await mkdtemp(join(tmpdir(), 'fp-import-'));
    try {
      const input = join(dir, `upload.${{ geojson: 'geojson', gpkg: 'gpkg', csv: 'csv', shapefile: 'zip' }[format]}`);
      await writeFile(input, bytes);
      const source = format === 'shapefile' ? `/vsizip/${input}` : input;
      const openOptions =
        format === 'csv'
          ? ['-oo', 'X_POSSIBLE_NAMES=lon,lng,long,longitude,x,laengengrad,längengrad,rechtswert', '-oo', 'Y_POSSIBLE_NAMES=lat,latitude,y,breitengrad,hochwert', '-oo', 'GEOM_POSSIBLE_NAMES=wkt,geometry,geom,geometrie', '-oo', 'KEEP_GEOM_COLUMNS=NO', '-oo', 'AUTODETECT_TYPE=NO']
          : [];
      const layers = await layerNames(source, openOptions);
      const layer = layers[0];
      if (layer === undefined) throw new AppError('VALIDATION_FAILED', 'the file holds no layer of features', { fields: [{ field: 'file', message: 'holds no features' }] });
      const fields = await fieldNames(source, layer, openOptions);
      const output = join(dir, 'out.geojsonl');
      // CSV coordinates have no CRS of their own: they are read as WGS 84 longitude/latitude.
      const srs = format === 'csv' ? ['-s_srs', 'EPSG:4326'] : [];
      await run('ogr2ogr', ['-f', 'GeoJSONSeq', output, source, layer, ...openOptions, ...srs, '-t_srs', 'EPSG:4326', '-dim', 'XY', '-lco', 'COORDINATE_PRECISION=9', '-preserve_fid'], CONVERT_TIMEOUT_MS);
      const { size } = await stat(output);
      if (size > MAX_OUTPUT_BYTES) throw tooLarge(`the file's features take more than ${MAX_OUTPUT_BYTES / 1024 / 1024} MiB as GeoJSON`);
      return { format, layer, fields, rows: await readRows(output) };
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
}

function tooLarge(message: string): AppError {
  return new AppError('PAYLOAD_TOO_LARGE', message);
}

async function readRows(path: string): Promise<SourceRow[]> {
  const rows: SourceRow[] = [];
  const lines = createInterface({ input: createReadStream(path, { encoding: 'utf8' }), crlfDelay: Infinity });
  for await (const line of lines) {
    const text = line.startsWith('\u001e') ? line.slice(1) : line;
    if (text.trim() === '') continue;
    if (rows.length >= MAX_IMPORT_ROWS) throw tooLarge(`a file may hold at most ${MAX_IMPORT_ROWS} features; split it`);
    if (text.length > MAX_FEATURE_LINE) throw tooLarge(`feature ${rows.length + 1} is larger than ${MAX_FEATURE_LINE / 1024 / 1024} MiB`);
    const feature = JSON.parse(text) as { geometry?: SourceRow['geometry']; properties?: Record<string, unknown> | null };
    rows.push({ row: rows.length + 1, geometry: feature.geometry ?? null, attributes: feature.properties ?? {} });
    if (rows.length % CHUNK === 0) await nextTurn();
  }
  return rows;
}

/** The layers of a source, from `ogrinfo -ro -q` ("1: name (Point)"). */
async function layerNames(source: string, openOptions: string[]): Promise<string[]> {
  const out = await run('ogrinfo', ['-ro', '-q', ...openOptions, source], 30_000);
  return out
    .split('\n')
    .map((line) => /^\d+: (.+?)(?: \([^)]*\))?$/.exec(line.trim())?.[1])
    .filter((name): name is string => name !== undefined);
}

/** The attribute names of a layer, from `ogrinfo -so` ("name: String (0.0)"). */
async function fieldNames(source: string, layer: string, openOptions: string[]): Promise<string[]> {
  const out = await run('ogrinfo', ['-ro', '-so', ...openOptions, source, layer], 30_000);
  const fields: string[] = [];
  let started = false;
  for (const line of out.split('\n')) {
    if (/^(Geometry Column|FID Column)\s*=/.test(line)) {
      started = true;
      continue;
    }
    const match = /^([^:]+): (?:String|Integer|Integer64|Real|Date|DateTime|Time|Binary|StringList|IntegerList|Integer64List|RealList|Boolean|Int16|Float32)\b/.exec(line);
    if (match && (started || !line.startsWith(' '))) fields.push(match[1]!);
  }
  return fields;
}

/** Runs a GDAL tool; its stdout, or an AppError naming what GDAL said (a file it cannot read is the caller's 400). */
function run(command: string, args: string[], timeoutMs: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { PATH: process.env.PATH ?? '/usr/bin:/bin', CPL_LOG: '/dev/null', GDAL_PAM_ENABLED: 'NO', OGR_GEOJSON_MAX_OBJ_SIZE: '0' } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (data: Buffer) => {
      if (stdout.length < 1_000_000) stdout += data.toString();
    });
    child.stderr.on('data', (data: Buffer) => {
      if (stderr.length < 10_000) stderr += data.toString();
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      if (code === 0) return resolve(stdout);
      if (signal) return reject(new AppError('PAYLOAD_TOO_LARGE', `reading the file took longer than ${timeoutMs / 1000} s`));
      const said = stderr.split('\n').find((line) => /ERROR|FAILURE/.test(line))?.replace(/^ERROR \d+: /, '').replace(/\/tmp\/fp-import-[^/\s]+\//g, '').slice(0, 300);
      reject(new AppError('VALIDATION_FAILED', `GDAL cannot read the file: ${said ?? `exit ${code}`}`, { fields: [{ field: 'file', message: said ?? 'cannot be read' }] }));
    });
  });
}
