/**
 * What makes the embedded database start fast: a cached, initialised database image and PostGIS
 * loaded lazily from an unpacked copy of its files, both under a git-ignored cache folder (default
 * `.cache/embedded-db/`).
 *
 * Glossary:
 * - engine: the PGlite and PostGIS package versions. A data folder (and so an image) only works
 *   with the engine that wrote it, so every cache entry lives in a folder named after its engine.
 * - schema: what the API's start applies to a database, as name → checksum (each migration file,
 *   plus e.g. the graphile-worker version whose schema it installs).
 * - image: a data folder as it was right after a fresh start had applied the whole schema, before
 *   the API served anything: initdb, CREATE EXTENSION postgis and every migration already done.
 *
 * Why: on a fresh folder PGlite runs initdb (in a second WebAssembly instance), then the migrations
 * create PostGIS and the tables; that is most of a first start. Copying a folder is not. On an
 * existing folder, most of the remaining time went into PostGIS's bundle: unpacking it into
 * PGlite's in-memory file system and compiling and linking its 17 MB library at every start, before
 * the backend even started. Now its files are unpacked once per engine and mounted, and PostgreSQL
 * loads the library when a statement first needs it (lazyPostgis).
 *
 * Correctness does not depend on the image being current: an image is used only when everything it
 * holds is still part of the schema unchanged (same migration files, same checksums), and the API
 * applies the rest with its normal migration run, which records each file in the ledger as usual.
 */
import { createHash } from 'node:crypto';
import { constants, existsSync, readdirSync, readFileSync } from 'node:fs';
import { copyFile, mkdir, readdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { fileURLToPath } from 'node:url';
import { gunzip } from 'node:zlib';
import type { Extension } from '@electric-sql/pglite';
import { postgis } from '@electric-sql/pglite-postgis';
import { readMigrations } from './migrate.js';

/** Default cache folder: `.cache/embedded-db` at the repository root (git-ignored). */
export const DEFAULT_IMAGE_CACHE_DIR = fileURLToPath(new URL('../../../../.cache/embedded-db/', import.meta.url));

export type SchemaFingerprint = Readonly<Record<string, string>>;

interface ImageManifest {
  engine: string;
  schema: SchemaFingerprint;
  createdAt: string;
}

/** The installed version of a package: the package.json above its entry point that names it. */
export function packageVersion(specifier: string): string {
  for (let dir = dirname(fileURLToPath(import.meta.resolve(specifier))); dir !== dirname(dir); dir = dirname(dir)) {
    try {
      const manifest = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { name?: string; version: string };
      if (manifest.name === specifier) return manifest.version;
    } catch {
      // no package.json at this level
    }
  }
  throw new Error(`cannot find the version of ${specifier}`);
}

/** `pglite-0.5.8+postgis-0.2.8`: the folder name of everything cached for this engine. */
export function engineKey(): string {
  return `pglite-${packageVersion('@electric-sql/pglite')}+postgis-${packageVersion('@electric-sql/pglite-postgis')}`;
}

/**
 * The schema an API start applies (boot.ts): every migration file, then graphile-worker's own
 * schema, which its version decides. `migrationsDir` is for tests.
 */
export function apiSchema(migrationsDir?: string): SchemaFingerprint {
  return { ...Object.fromEntries(readMigrations(migrationsDir).map((m) => [m.name, m.checksum])), 'graphile-worker': packageVersion('graphile-worker') };
}

// ---- tar (ustar, as PGlite and the PostGIS bundle write it) ----

interface TarEntry {
  name: string;
  /** '0' file, '5' directory, '2' symbolic link; anything else is refused (see readTar). */
  type: string;
  mode: number;
  /** The 512-byte header as found, and the data (unpadded). */
  header: Buffer;
  data: Buffer;
}

function cString(buffer: Buffer, start: number, length: number): string {
  const field = buffer.subarray(start, start + length);
  const end = field.indexOf(0);
  return field.subarray(0, end < 0 ? field.length : end).toString('utf8');
}

/**
 * Reads a plain ustar archive. Entry types other than files, folders and symbolic links (hard links,
 * GNU long names, pax headers) are refused rather than misread: neither writer produces them.
 */
function readTar(tar: Buffer): TarEntry[] {
  const entries: TarEntry[] = [];
  for (let offset = 0; offset + 512 <= tar.length; ) {
    const header = tar.subarray(offset, offset + 512);
    if (header.every((byte) => byte === 0)) break;
    const prefix = cString(header, 345, 155);
    const base = cString(header, 0, 100);
    const name = cString(header, 257, 6).startsWith('ustar') && prefix ? `${prefix}/${base}` : base;
    const size = parseInt(cString(header, 124, 12).trim() || '0', 8);
    const type = String.fromCharCode(header[156] || 0x30);
    const mode = parseInt(cString(header, 100, 8).trim() || '644', 8);
    if (!['0', '2', '5'].includes(type) || !Number.isFinite(size) || name.split('/').includes('..')) {
      throw new Error(`unexpected tar entry ${JSON.stringify(name)} of type ${JSON.stringify(type)}`);
    }
    entries.push({ name, type, mode, header, data: tar.subarray(offset + 512, offset + 512 + size) });
    offset += 512 + Math.ceil(size / 512) * 512;
  }
  return entries;
}

/** Writes `write(tmp)` to `target` atomically: a concurrent start sees all of it or nothing. */
async function publish(target: string, write: (tmp: string) => Promise<void>): Promise<void> {
  const tmp = `${target}.tmp-${process.pid}`;
  await rm(tmp, { recursive: true, force: true });
  await mkdir(dirname(target), { recursive: true });
  try {
    await write(tmp);
    await rename(tmp, target);
  } catch (error) {
    await rm(tmp, { recursive: true, force: true });
    // Another process published the same entry first: theirs is as good as ours.
    if (!existsSync(target)) throw error;
  }
}

// ---- PostGIS, loaded lazily ----

/**
 * What `postgis` needs from the bundle: its library, its control file and install script (for
 * CREATE EXTENSION on a database that has no image), and PROJ's data (for ST_Transform).
 * Left out: postgis_raster, postgis_topology, the tiger geocoder and the upgrade scripts.
 */
const POSTGIS_FILES = [
  /^lib\/postgresql\/postgis-3\.so$/,
  /^share\/postgresql\/extension\/postgis\.control$/,
  /^share\/postgresql\/extension\/postgis--\d+\.\d+\.\d+\.sql$/,
  /^share\/proj\//,
];

/**
 * The `postgis` extension, loaded lazily from an unpacked copy of the slim bundle on disk.
 *
 * PGlite loads an extension bundle at every start: it gunzips the archive, copies every file into
 * its in-memory file system and compiles and links the PostGIS library (17 MB of WebAssembly), all
 * before the backend starts: two thirds of opening an existing folder. None of that is needed to
 * open the database. Here the bundle is unpacked once per engine into the cache folder (written
 * atomically), and each start only mounts that folder into PGlite's file system (Emscripten's
 * NODEFS, as PGlite mounts the data folder) with a link from every place PostgreSQL looks for a
 * PostGIS file. PostgreSQL then loads the library the first time a statement needs it (a PostGIS
 * function or type, CREATE EXTENSION), reading and compiling it then: that statement takes longer,
 * and never fails for it. boot.ts makes the API load it right after it starts listening.
 *
 * Falls back to the package's own bundle if the unpacked copy cannot be made.
 */
export async function lazyPostgis(cacheDir: string = DEFAULT_IMAGE_CACHE_DIR): Promise<Extension> {
  const dir = join(cacheDir, engineKey(), 'postgis-files');
  let files: string[];
  try {
    if (!existsSync(join(dir, 'files.json'))) await unpackSlimPostgis(dir);
    files = JSON.parse(readFileSync(join(dir, 'files.json'), 'utf8')) as string[];
  } catch {
    return postgis;
  }
  return {
    name: postgis.name,
    setup: async (pg, emscriptenOpts: { preRun?: Array<(mod: unknown) => void> }) => {
      const { emscriptenOpts: opts } = (await postgis.setup(pg, emscriptenOpts)) as { emscriptenOpts: typeof emscriptenOpts };
      const mountPoint = `${WASM_PREFIX}/postgis-files`;
      const mount = (mod: unknown): void => {
        const { FS } = mod as { FS: EmscriptenFs };
        FS.mkdirTree(mountPoint);
        FS.mount(FS.filesystems.NODEFS, { root: join(dir, 'files') }, mountPoint);
        // PROJ's data is one folder of its own; the rest go next to PostgreSQL's own files.
        FS.symlink(`${mountPoint}/share/proj`, `${WASM_PREFIX}/share/proj`);
        for (const file of files) if (!file.startsWith('share/proj/')) FS.symlink(`${mountPoint}/${file}`, `${WASM_PREFIX}/${file}`);
      };
      return { emscriptenOpts: { ...opts, preRun: [...(opts.preRun ?? []), mount] } };
    },
  };
}

/** Where PGlite's file system keeps PostgreSQL's installation (pglUtils.WASM_PREFIX). */
const WASM_PREFIX = '/pglite';

/** The part of Emscripten's FS API the mount uses. */
interface EmscriptenFs {
  filesystems: { NODEFS: unknown };
  mkdirTree(path: string): void;
  mount(type: unknown, options: { root: string }, mountPoint: string): void;
  symlink(target: string, path: string): void;
}

/**
 * Unpacks what `postgis` needs from the package's bundle (POSTGIS_FILES) into `dir`/files, with
 * `dir`/files.json listing the files; the whole folder appears at once or not at all.
 */
async function unpackSlimPostgis(dir: string): Promise<void> {
  const full = fileURLToPath(new URL('./postgis.tar.gz', import.meta.resolve('@electric-sql/pglite-postgis')));
  const kept = readTar(await promisify(gunzip)(await readFile(full))).filter((entry) => entry.type === '0' && POSTGIS_FILES.some((pattern) => pattern.test(entry.name)));
  if (!kept.some((entry) => entry.name.endsWith('.so'))) throw new Error('the PostGIS bundle has no postgis-3.so');
  await publish(dir, async (tmp) => {
    for (const entry of kept) {
      const path = join(tmp, 'files', entry.name);
      await mkdir(dirname(path), { recursive: true });
      await writeFile(path, entry.data, { mode: 0o644 });
    }
    await writeFile(join(tmp, 'files.json'), JSON.stringify(kept.map((entry) => entry.name)));
  });
}

// ---- database images ----

export interface ImageChoice {
  /** The image's pgdata folder. */
  dir: string;
  /** True when it holds exactly the current schema (nothing left to migrate, nothing to save). */
  current: boolean;
}

/** A short, stable folder name; the manifest holds the full fingerprint that decides what is usable. */
function schemaKey(schema: SchemaFingerprint): string {
  const text = JSON.stringify(Object.entries(schema).sort(([a], [b]) => a.localeCompare(b)));
  return createHash('sha256').update(text).digest('hex').slice(0, 16);
}

/**
 * The best image for `schema`: the exact one, or else the one holding the most of it, provided
 * everything it holds is still in `schema` unchanged. Undefined when none is usable.
 */
export function chooseImage(cacheDir: string, schema: SchemaFingerprint): ImageChoice | undefined {
  const engineDir = join(cacheDir, engineKey());
  let best: { dir: string; size: number } | undefined;
  const entries = existsSync(engineDir) ? readdirSync(engineDir, { withFileTypes: true }) : [];
  for (const entry of entries) {
    if (!entry.isDirectory() || entry.name.includes('.tmp-')) continue;
    let manifest: ImageManifest;
    try {
      manifest = JSON.parse(readFileSync(join(engineDir, entry.name, 'image.json'), 'utf8')) as ImageManifest;
    } catch {
      continue; // not an image (or a damaged one): ignored
    }
    const held = Object.entries(manifest.schema);
    if (manifest.engine !== engineKey() || !held.every(([name, checksum]) => schema[name] === checksum)) continue;
    if (!best || held.length > best.size) best = { dir: join(engineDir, entry.name, 'pgdata'), size: held.length };
  }
  if (!best) return undefined;
  return { dir: best.dir, current: best.size === Object.keys(schema).length };
}

/**
 * Copies an image's pgdata into `dataDir`, which must be empty. The copy is made next to it and
 * renamed into place, so a start killed half-way leaves no half-filled data folder behind.
 */
export async function restoreImage(image: string, dataDir: string): Promise<void> {
  const staging = `${dataDir}.restore-${process.pid}`;
  await rm(staging, { recursive: true, force: true });
  try {
    await copyTree(image, staging);
    await rm(dataDir, { recursive: true, force: true });
    await rename(staging, dataDir);
  } catch (error) {
    await rm(staging, { recursive: true, force: true });
    throw error;
  }
}

async function copyTree(from: string, to: string): Promise<void> {
  await mkdir(to, { recursive: true, mode: 0o700 });
  for (const entry of await readdir(from, { withFileTypes: true })) {
    if (entry.isDirectory()) await copyTree(join(from, entry.name), join(to, entry.name));
    // A copy-on-write clone where the file system offers it, a plain copy elsewhere.
    else await copyFile(join(from, entry.name), join(to, entry.name), constants.COPYFILE_FICLONE);
  }
}

/** Stores `tar` (a PGlite data folder dump) as the image of `schema`. */
export async function saveImage(cacheDir: string, schema: SchemaFingerprint, tar: Buffer): Promise<string> {
  const target = join(cacheDir, engineKey(), schemaKey(schema));
  await publish(target, async (tmp) => {
    const pgdata = join(tmp, 'pgdata');
    await mkdir(pgdata, { recursive: true, mode: 0o700 });
    for (const entry of readTar(tar)) {
      const path = join(pgdata, entry.name);
      if (entry.type === '5') await mkdir(path, { recursive: true, mode: 0o700 });
      else if (entry.type !== '0') throw new Error(`unexpected entry ${entry.name} in the data folder dump`);
      else {
        await mkdir(dirname(path), { recursive: true, mode: 0o700 });
        await writeFile(path, entry.data, { mode: 0o600 });
      }
    }
    const manifest: ImageManifest = { engine: engineKey(), schema, createdAt: new Date().toISOString() };
    await writeFile(join(tmp, 'image.json'), `${JSON.stringify(manifest, null, 2)}\n`);
  });
  return target;
}
