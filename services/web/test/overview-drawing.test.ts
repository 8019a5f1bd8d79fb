/**
 * The overview's drawing (lib/overview-tiles.ts, lib/rectangle-raster.ts), part by part:
 *
 * - its own reading of a tile's bytes against @mapbox/vector-tile reading the same bytes: every ring,
 *   line and point in the same place, properties and ids behind multi-byte varints, each feature
 *   counted where it belongs;
 * - bytes that lie (cut short anywhere, or with bytes changed) end the drawing or throw, and never
 *   hang it, however large a length or count they claim;
 * - in Chromium, when there is one: the rectangles it paints by arithmetic against the same
 *   rectangles drawn by the canvas's own fillRect.
 *
 * In Node the canvas is a recorder of the calls made to it, so what the drawing asked for can be
 * compared with what the tile holds.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { VectorTile } from '@mapbox/vector-tile';
import { PbfReader, PbfWriter } from 'pbf';
import ts from 'typescript';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser } from 'playwright-core';
import { drawOverviewTile, type OverviewPalette } from '../src/lib/overview-tiles.js';
import { CHROMIUM, launchChromium } from './harness.js';

const EXTENT = 4096;
const SIZE = 256;
const SCALE = SIZE / EXTENT;
const COLOURS: Record<string, string> = { friedhof: '#2e7d32', blumenbeet: '#c2185b', denkmal: '#1565c0' };
const palette: OverviewPalette = {
  colour: (kategorie) => COLOURS[String(kategorie)] ?? '#555555',
  areaFill: (colour) => `${colour}40`,
  areaOutline: 2,
  lineWidth: 3,
  pointRadius: 6,
  pointOutline: 2,
  pointOutlineColour: '#ffffff',
};

// ---- A tile, written field by field (vector_tile.proto, MVT 2.1) ----

type Point = [number, number];
interface TileFeature {
  id?: number;
  type: 1 | 2 | 3;
  /** Key and value indexes, in pairs. */
  tags: number[];
  /** Points: one part of points; lines: a part per line; polygons: a part per ring. */
  parts: Point[][];
}

const zigzag = (n: number) => (n << 1) ^ (n >> 31);
const command = (id: number, count: number) => (count << 3) | id;

function geometryOf(feature: TileFeature): number[] {
  const out: number[] = [];
  let [x, y] = [0, 0];
  const step = ([px, py]: Point) => {
    out.push(zigzag(px - x), zigzag(py - y));
    [x, y] = [px, py];
  };
  if (feature.type === 1) {
    const points = feature.parts[0]!;
    out.push(command(1, points.length));
    points.forEach(step);
    return out;
  }
  for (const part of feature.parts) {
    out.push(command(1, 1));
    step(part[0]!);
    out.push(command(2, part.length - 1));
    part.slice(1).forEach(step);
    if (feature.type === 3) out.push(command(7, 1));
  }
  return out;
}

/**
 * A tile with one layer `features` of these keys, string values and features; the features after
 * the keys and values when `featuresLast` (the specification leaves the order open), so the tile's
 * last byte is one of its last feature's geometry.
 */
function encodeTile(keys: string[], values: string[], features: TileFeature[], featuresLast = false): Uint8Array {
  const pbf = new PbfWriter();
  pbf.writeMessage(3, (_: unknown, layer: PbfWriter) => {
    layer.writeVarintField(15, 2);
    layer.writeStringField(1, 'features');
    layer.writeVarintField(5, EXTENT);
    if (featuresLast) {
      for (const key of keys) layer.writeStringField(3, key);
      for (const value of values) layer.writeMessage(4, (__: unknown, message: PbfWriter) => message.writeStringField(1, value), undefined);
    }
    for (const feature of features) {
      layer.writeMessage(2, (__: unknown, message: PbfWriter) => {
        if (feature.id !== undefined) message.writeVarintField(1, feature.id);
        message.writePackedVarint(2, feature.tags);
        message.writeVarintField(3, feature.type);
        message.writePackedVarint(4, geometryOf(feature));
      }, undefined);
    }
    if (!featuresLast) {
      for (const key of keys) layer.writeStringField(3, key);
      for (const value of values) layer.writeMessage(4, (__: unknown, message: PbfWriter) => message.writeStringField(1, value), undefined);
    }
  }, undefined);
  return pbf.finish();
}

// ---- A canvas that records what is asked of it ----

class RecordedPath {
  readonly subpaths: number[][] = [];
  readonly arcs: Point[] = [];
  moveTo(x: number, y: number) {
    this.subpaths.push([x, y]);
  }
  lineTo(x: number, y: number) {
    this.subpaths.at(-1)!.push(x, y);
  }
  closePath() {}
  arc(x: number, y: number) {
    this.arcs.push([x, y]);
  }
}

interface Draw {
  op: 'fill' | 'stroke';
  style: string;
  lineWidth: number;
  path: RecordedPath;
}

function recordingContext() {
  const draws: Draw[] = [];
  const images: ImageData[] = [];
  const context = {
    fillStyle: '#000000' as unknown,
    strokeStyle: '#000000' as unknown,
    lineWidth: 1,
    lineJoin: 'miter',
    lineCap: 'butt',
    fill(path: RecordedPath) {
      draws.push({ op: 'fill', style: String(this.fillStyle), lineWidth: this.lineWidth, path });
    },
    stroke(path: RecordedPath) {
      draws.push({ op: 'stroke', style: String(this.strokeStyle), lineWidth: this.lineWidth, path });
    },
    putImageData(image: ImageData) {
      images.push(image);
    },
  };
  return { context: context as unknown as CanvasRenderingContext2D, draws, images };
}

/** Node has neither; the drawing needs Path2D for its paths and ImageData for its rectangles. */
const browserGlobals = globalThis as unknown as Record<string, unknown>;
const installed: string[] = [];
beforeAll(() => {
  const install = (name: string, value: unknown) => {
    if (name in browserGlobals) return;
    browserGlobals[name] = value;
    installed.push(name);
  };
  install('Path2D', RecordedPath);
  install('ImageData', class {
    readonly data: Uint8ClampedArray;
    constructor(readonly width: number, readonly height: number) {
      this.data = new Uint8ClampedArray(width * height * 4);
    }
  });
});
// The test files after this one in its fork (vitest.config.ts, project "shared") get Node's globals back.
afterAll(() => {
  for (const name of installed.splice(0)) delete browserGlobals[name];
});

// The test tile: keys, then 200 values before the ones used, so every tag's value index is a
// two-byte varint.
const KEYS = ['kategorie', 'status'];
const VALUES = [...Array.from({ length: 200 }, (_, i) => `filler ${i}`), 'friedhof', 'blumenbeet', 'denkmal', 'approved', 'draft'];
const value = (text: string) => VALUES.indexOf(text);
const square = (x: number, y: number, side: number): Point[] => [[x, y], [x + side, y], [x + side, y + side], [x, y + side]];
const FEATURES: TileFeature[] = [
  // An area with a hole (the ring wound the other way), well inside the tile.
  { id: 1, type: 3, tags: [0, value('friedhof'), 1, value('approved')], parts: [square(100, 100, 900), [[300, 300], [300, 700], [700, 700], [700, 300]]] },
  // Two areas of one feature.
  { id: 2, type: 3, tags: [0, value('blumenbeet'), 1, value('draft')], parts: [square(1200, 1200, 400), square(2000, 2000, 400)] },
  // A line reaching into the buffer left of the tile (negative coordinates, multi-byte deltas).
  { id: 3, type: 2, tags: [0, value('denkmal'), 1, value('approved')], parts: [[[-200, 3000], [1500, 3100], [3900, 3900]]] },
  // Two points.
  { id: 4, type: 1, tags: [0, value('denkmal'), 1, value('draft')], parts: [[[500, 2500], [3800, 400]]] },
  // An area across the tile's right edge, with an id beyond 32 bits: shared with the neighbour.
  { id: 2 ** 40, type: 3, tags: [0, value('friedhof'), 1, value('approved')], parts: [square(3900, 1000, 500)] },
  // An area entirely in the buffer: the neighbour's, not counted here.
  { id: 6, type: 3, tags: [0, value('friedhof'), 1, value('approved')], parts: [square(4200, 1000, 300)] },
];

/** @mapbox/vector-tile's reading of the same bytes, in canvas pixels. */
function referenceGeometry(bytes: Uint8Array) {
  const layer = new VectorTile(new PbfReader(bytes)).layers.features!;
  return Array.from({ length: layer.length }, (_, i) => {
    const feature = layer.feature(i);
    const rings = feature.loadGeometry().map((ring) => {
      const points = ring.map((point) => [point.x * SCALE, point.y * SCALE] as Point);
      // The reference repeats a closed ring's first point at its end; the path closes instead.
      if (feature.type === 3) points.pop();
      return points;
    });
    return { type: feature.type, properties: feature.properties, rings };
  });
}

const flat = (points: Point[]) => points.flat();
const sorted = (lists: number[][]) => lists.map((list) => JSON.stringify(list)).sort();

describe('the overview reads a tile as @mapbox/vector-tile does', () => {
  const bytes = encodeTile(KEYS, VALUES, FEATURES);

  it('puts every ring, line and point where the reference reads it, in its kategorie’s colour and width', () => {
    const { context, draws } = recordingContext();
    drawOverviewTile(bytes, context, SIZE, 1, palette, undefined);
    const reference = referenceGeometry(bytes);
    const colourOf = (properties: Record<string, unknown>) => palette.colour(properties.kategorie);

    const areas = reference.filter((feature) => feature.type === 3);
    // Areas: filled translucent and outlined, each ring once in each.
    const expectedFills = areas.flatMap((feature) => feature.rings.map((ring) => [palette.areaFill(colourOf(feature.properties)), ...flat(ring)].join()));
    const fills = draws.filter((draw) => draw.op === 'fill' && draw.path.arcs.length === 0).flatMap((draw) => draw.path.subpaths.map((subpath) => [draw.style, ...subpath].join()));
    expect(fills.sort()).toEqual(expectedFills.sort());
    const outlines = draws.filter((draw) => draw.op === 'stroke' && draw.lineWidth === palette.areaOutline && draw.path.arcs.length === 0).flatMap((draw) => draw.path.subpaths.map((subpath) => [draw.style, ...subpath].join()));
    expect(outlines.sort()).toEqual(areas.flatMap((feature) => feature.rings.map((ring) => [colourOf(feature.properties), ...flat(ring)].join())).sort());

    const lines = draws.filter((draw) => draw.op === 'stroke' && draw.lineWidth === palette.lineWidth);
    expect(lines.map((draw) => draw.style)).toEqual([COLOURS.denkmal]);
    expect(sorted(lines[0]!.path.subpaths)).toEqual(sorted(reference.filter((feature) => feature.type === 2).flatMap((feature) => feature.rings.map(flat))));

    const points = draws.filter((draw) => draw.op === 'fill' && draw.path.arcs.length > 0);
    expect(points.map((draw) => draw.style)).toEqual([COLOURS.denkmal]);
    expect(points[0]!.path.arcs).toEqual(reference.find((feature) => feature.type === 1)!.rings.flat());
  });

  it('counts a feature inside the tile as its own, one across its edge by its id (beyond 32 bits), one in the buffer not at all', () => {
    const { context } = recordingContext();
    const held = drawOverviewTile(bytes, context, SIZE, 1, palette, undefined);
    // Features 1–4 lie inside, except the line, which reaches into the buffer: shared, by its id.
    expect(held.own).toBe(3);
    expect(held.shared.sort()).toEqual([String(2 ** 40), '3'].sort());
  });

  it('gives a filter the properties behind two-byte value indexes', () => {
    const { context, draws } = recordingContext();
    const seen: Record<string, unknown>[] = [];
    drawOverviewTile(bytes, context, SIZE, 1, palette, (properties) => {
      seen.push(properties);
      return properties.status === 'draft';
    });
    expect(seen).toContainEqual({ kategorie: 'friedhof', status: 'approved' });
    expect(seen).toHaveLength(FEATURES.length);
    // Only the two draft features are drawn: the blumenbeet areas and the denkmal points.
    expect(new Set(draws.map((draw) => draw.style))).toEqual(new Set([palette.areaFill(COLOURS.blumenbeet!), COLOURS.blumenbeet, COLOURS.denkmal, palette.pointOutlineColour]));
  });

  it('paints areas no wider than their outline as rectangles into one image, where the tile puts them', () => {
    // Two squares of 16 units: one canvas pixel each at this scale, narrower than the 2-pixel outline.
    const tiny = encodeTile(KEYS, VALUES, [
      { id: 7, type: 3, tags: [0, value('friedhof')], parts: [square(1600, 1600, 16)] },
      { id: 8, type: 3, tags: [0, value('blumenbeet')], parts: [square(3200, 800, 16)] },
    ]);
    const { context, draws, images } = recordingContext();
    const held = drawOverviewTile(tiny, context, SIZE, 1, palette, undefined);
    expect(held.own).toBe(2);
    expect(draws).toEqual([]);
    expect(images).toHaveLength(1);
    const pixel = (x: number, y: number) => Array.from(images[0]!.data.subarray((y * SIZE + x) * 4, (y * SIZE + x) * 4 + 4));
    // Square 1 covers pixel (100, 100); with the outline's half width it reaches 99–101.
    expect(pixel(100, 100)).toEqual([0x2e, 0x7d, 0x32, 255]);
    expect(pixel(99, 101)).toEqual([0x2e, 0x7d, 0x32, 255]);
    expect(pixel(200, 50)).toEqual([0xc2, 0x18, 0x5b, 255]);
    expect(pixel(150, 150)).toEqual([0, 0, 0, 0]);
    const painted = Array.from({ length: SIZE * SIZE }, (_, i) => images[0]!.data[i * 4 + 3]!).filter((alpha) => alpha > 0).length;
    expect(painted).toBe(2 * 9);
  });

  it('ends or throws on bytes cut short anywhere or changed, however long a length or count they claim', () => {
    // A seeded generator, so a failure names a case that can be run again.
    let seed = 20261123;
    const random = () => {
      seed = (seed + 0x6d2b79f5) | 0;
      let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
      t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
    const cases: Uint8Array[] = [];
    for (let length = 0; length < bytes.length; length++) cases.push(bytes.subarray(0, length));
    // A varint that goes on past the last byte: the last bytes of a tile that ends in a geometry,
    // each made a continuation byte (a reader that trusts it reads on forever).
    const featuresLast = encodeTile(KEYS, VALUES, FEATURES, true);
    expect(referenceGeometry(featuresLast)).toEqual(referenceGeometry(bytes));
    for (let back = 1; back <= 8; back++) {
      for (const byte of [0x80, 0xff]) {
        const changed = Uint8Array.from(featuresLast);
        changed[changed.length - back] = byte;
        cases.push(changed);
      }
    }
    for (let i = 0; i < 2000; i++) {
      const changed = Uint8Array.from(bytes);
      for (let k = 1 + Math.floor(random() * 3); k > 0; k--) changed[Math.floor(random() * changed.length)] = random() < 0.5 ? 0xff : Math.floor(random() * 256);
      cases.push(changed);
    }
    let ended = 0;
    let threw = 0;
    for (const tile of cases) {
      const { context } = recordingContext();
      try {
        const held = drawOverviewTile(tile, context, SIZE, 1, palette, undefined);
        expect(held.own).toBeLessThanOrEqual(FEATURES.length);
        ended++;
      } catch (error) {
        expect(error).toBeInstanceOf(Error);
        threw++;
      }
    }
    expect(ended + threw).toBe(cases.length);
    // Both happen: a damaged layer header throws in PbfReader, damaged features draw what they can.
    expect(ended).toBeGreaterThan(100);
    expect(threw).toBeGreaterThan(100);
  }, 60_000);
});

// ---- In Chromium: the rectangles against fillRect ----

const raster = join(import.meta.dirname, '../src/lib/rectangle-raster.ts');
const missingChromium = existsSync(CHROMIUM) ? undefined : `no Chromium at ${CHROMIUM} (apt-get install chromium, or set CHROMIUM_PATH)`;
if (missingChromium) console.log(`skipping the rectangle raster comparison: ${missingChromium}`);

describe.skipIf(missingChromium !== undefined)('the rectangles painted by arithmetic', () => {
  let browser: Browser;
  beforeAll(async () => {
    browser = await launchChromium();
  }, 60_000);
  afterAll(async () => {
    await browser?.close();
  });

  it('are what the canvas’s fillRect draws, within a few steps of 255, for 3 000 overlapping, translucent, fractional ones', async () => {
    const page = await browser.newPage();
    // The module imports nothing: its TypeScript, transpiled, is the page's script.
    const script = ts.transpileModule(readFileSync(raster, 'utf8'), { compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 } }).outputText;
    await page.setContent('<!doctype html><title>raster</title>');
    await page.addScriptTag({ type: 'module', content: `${script}\nglobalThis.rectangleRaster = { RectangleRaster, canvasColour };` });
    await page.waitForFunction(() => 'rectangleRaster' in globalThis);
    const result = await page.evaluate(`(() => {
      const { RectangleRaster, canvasColour } = globalThis.rectangleRaster;
      const size = 256;
      let seed = 7;
      const random = () => ((seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) / 4294967296);
      const colours = ['#2e7d32', '#c2185b', '#1565c0', 'rgba(200, 120, 0, 0.5)', '#00000080'];
      const canvas = (() => { const c = document.createElement('canvas'); c.width = c.height = size; return c.getContext('2d'); })();
      const painted = new RectangleRaster(size);
      for (let i = 0; i < 3000; i++) {
        const colour = colours[i % colours.length];
        // Mostly a few pixels, as the overview's are, some larger; a few reach past the edges.
        const [x, y] = [random() * (size + 20) - 10, random() * (size + 20) - 10];
        const [width, height] = random() < 0.9 ? [0.3 + random() * 3, 0.3 + random() * 3] : [random() * 40, random() * 40];
        canvas.fillStyle = colour;
        canvas.fillRect(x, y, width, height);
        const [r, g, b, a] = canvasColour(canvas, colour);
        painted.fill(r, g, b, a, x, y, width, height);
      }
      const expected = canvas.getImageData(0, 0, size, size).data;
      const actual = painted.toImageData().data;
      // Compared premultiplied, as a pixel is seen: a colour under almost no alpha does not show.
      let max = 0, sum = 0, covered = 0;
      for (let i = 0; i < expected.length; i += 4) {
        if (expected[i + 3] > 0) covered++;
        for (let c = 0; c < 4; c++) {
          const weight = c === 3 ? 1 : 1 / 255;
          const difference = Math.abs(expected[i + c] * (c === 3 ? 1 : expected[i + 3]) * weight - actual[i + c] * (c === 3 ? 1 : actual[i + 3]) * weight);
          max = Math.max(max, difference);
          sum += difference;
        }
      }
      return { max, mean: sum / expected.length, covered };
    })()`) as { max: number; mean: number; covered: number };
    await page.close();
    // Most of the raster is covered, so the comparison is not one of two empty images.
    expect(result.covered).toBeGreaterThan(256 * 256 * 0.3);
    expect(result.mean).toBeLessThan(0.5);
    expect(result.max).toBeLessThanOrEqual(16);
  });
});
