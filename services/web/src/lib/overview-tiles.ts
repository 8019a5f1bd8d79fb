/**
 * The overview: a vector tile of the API (GET /api/tiles/{z}/{x}/{y}.mvt) drawn straight onto one
 * canvas, for the views below GEOJSON_MIN_ZOOM (lib/map.ts), where nothing is edited or snapped to.
 *
 * Why not OpenLayers' vector tile layer there: it makes an object per feature (a RenderFeature with
 * its coordinate, ring and property arrays), then per feature a style call and a list of drawing
 * instructions, and replays those into the tile's canvas, one path and one stroke per feature. For
 * the whole city (100 000 areas, a few pixels or less each at zoom 7) that kept the main thread busy
 * for about two seconds on two cores, most of it on objects that live for one frame. Here the tile's
 * bytes are read once: the geometry commands go straight into paths of a few hundred features per
 * colour and kind, each filled or stroked once, and an area smaller than its outline becomes one
 * rectangle, painted with the others by arithmetic (lib/rectangle-raster.ts); property values are
 * decoded only when a filter needs them (the values of `name` alone are a quarter of a tile's
 * bytes), and ids only for the features that cross the tile's edge, to count those once (see
 * OverviewTile). Same colours and widths as the map's
 * OpenLayers styles: both read lib/map.ts FEATURE_STYLE.
 *
 * Mapbox Vector Tile 2.1: https://github.com/mapbox/vector-tile-spec/tree/master/2.1
 */
import { PbfReader } from 'pbf';
import { canvasColour, RectangleRaster } from './rectangle-raster.js';

/** The map's feature styles, in CSS pixels (lib/map.ts FEATURE_STYLE, also behind its OpenLayers styles). */
export interface OverviewPalette {
  /** A feature's colour by its kategorie (any value, as the tile holds it). */
  colour(kategorie: unknown): string;
  /** The translucent fill of an area of that colour. */
  areaFill(colour: string): string;
  areaOutline: number;
  lineWidth: number;
  pointRadius: number;
  pointOutline: number;
  pointOutlineColour: string;
}

/** Which features of a tile are drawn; the properties as the map's filter sees them. */
export type OverviewFilter = ((properties: Record<string, unknown>) => boolean) | undefined;

/**
 * What a drawn tile holds, for "features loaded": each feature counted once over all the tiles of a
 * view. A feature entirely inside the tile's own square (not its buffer) is in no other tile's
 * square, so it counts as `own`; one entirely in the buffer belongs to a neighbour and is not
 * counted here; one crossing the square's edge may be in several tiles, so its id goes to `shared`
 * and the view counts the distinct ids.
 */
export interface OverviewTile {
  own: number;
  shared: string[];
}

const LAYER = 'features';
// MVT field numbers (vector_tile.proto).
const TILE_LAYERS = 3;
const LAYER_NAME = 1;
const LAYER_FEATURES = 2;
const LAYER_KEYS = 3;
const LAYER_VALUES = 4;
const LAYER_EXTENT = 5;
const FEATURE_ID = 1;
const FEATURE_TAGS = 2;
const FEATURE_TYPE = 3;
const FEATURE_GEOMETRY = 4;
const GEOMETRY_POINT = 1;
const GEOMETRY_LINE = 2;
const GEOMETRY_POLYGON = 3;

interface Layer {
  name: string;
  extent: number;
  keys: string[];
  /** Byte offsets of the values (of their lengths), decoded on demand (decodeValue). */
  values: number[];
  /** Byte offsets of the features (of their lengths). */
  features: number[];
}

function readLayer(pbf: PbfReader, end: number): Layer {
  const layer: Layer = { name: '', extent: 4096, keys: [], values: [], features: [] };
  while (pbf.pos < end) {
    const tag = pbf.readVarint();
    const field = tag >> 3;
    if (field === LAYER_NAME) layer.name = pbf.readString();
    else if (field === LAYER_EXTENT) layer.extent = pbf.readVarint();
    else if (field === LAYER_KEYS) layer.keys.push(pbf.readString());
    else if (field === LAYER_FEATURES || field === LAYER_VALUES) {
      // The offset of the message's length, where its reader starts.
      (field === LAYER_FEATURES ? layer.features : layer.values).push(pbf.pos);
      const length = pbf.readVarint();
      pbf.pos += length;
    } else pbf.skip(tag);
  }
  return layer;
}

/** A Value message (string, float, double, int, uint, sint or bool) at `offset`. */
function decodeValue(pbf: PbfReader, offset: number): unknown {
  pbf.pos = offset;
  const end = pbf.readVarint() + pbf.pos;
  let value: unknown;
  while (pbf.pos < end) {
    const tag = pbf.readVarint();
    switch (tag >> 3) {
      case 1: value = pbf.readString(); break;
      case 2: value = pbf.readFloat(); break;
      case 3: value = pbf.readDouble(); break;
      case 4: value = pbf.readVarint(true); break;
      case 5: value = pbf.readVarint(); break;
      case 6: value = pbf.readSVarint(); break;
      case 7: value = pbf.readBoolean(); break;
      default: pbf.skip(tag);
    }
  }
  return value;
}

type Kind = 'fill' | 'outline' | 'line' | 'point';
/**
 * Features per path: the canvas rasterises one path of tens of thousands of subpaths far slower than
 * many paths of a few hundred (the whole city took twice as long as OpenLayers' one path per
 * feature), so a path is drawn and replaced when it holds this many.
 */
const PATH_FEATURES = 256;

/** Paths by colour and kind, drawn as they fill up; areas smaller than their outline as rectangles. */
class Batches {
  private readonly paths = new Map<string, { kind: Kind; colour: string; path: Path2D; features: number }>();
  private readonly rectangles = new Map<string, number[]>();
  private drewPaths = false;
  constructor(
    private readonly context: CanvasRenderingContext2D,
    private readonly palette: OverviewPalette,
    private readonly widths: { areaOutline: number; line: number; pointOutline: number },
  ) {
    context.lineJoin = 'round';
    context.lineCap = 'round';
  }

  /** The path the next feature of this kind and colour goes into. */
  path(kind: Kind, colour: string): Path2D {
    const key = kind + colour;
    let batch = this.paths.get(key);
    if (!batch) this.paths.set(key, (batch = { kind, colour, path: new Path2D(), features: 0 }));
    if (batch.features === PATH_FEATURES) {
      this.draw(batch.kind, batch.colour, batch.path);
      batch.path = new Path2D();
      batch.features = 0;
    }
    batch.features++;
    return batch.path;
  }

  /**
   * An area no wider than its outline: the outline covers all of it (lib/map.ts tileAreaStyle), so
   * it is drawn as the square the outline covers (finish paints them).
   */
  rectangle(colour: string, x: number, y: number, width: number, height: number): void {
    let list = this.rectangles.get(colour);
    if (!list) this.rectangles.set(colour, (list = []));
    const half = this.widths.areaOutline / 2;
    list.push(x - half, y - half, width + 2 * half, height + 2 * half);
  }

  /**
   * Draws what is left: the paths not yet full, then the rectangles on top, painted by
   * RectangleRaster (it says why) and put onto the canvas at once: straight onto it when nothing
   * else was drawn (the canvas is still empty, as a dense tile's usually is), else through a
   * second canvas, since putImageData replaces pixels rather than drawing over them.
   */
  finish(size: number): void {
    for (const batch of this.paths.values()) this.draw(batch.kind, batch.colour, batch.path);
    if (this.rectangles.size === 0) return;
    const raster = new RectangleRaster(size);
    for (const [colour, list] of this.rectangles) {
      const rgba = canvasColour(this.context, colour);
      if (!rgba) continue;
      const [red, green, blue, alpha] = rgba;
      for (let i = 0; i < list.length; i += 4) raster.fill(red, green, blue, alpha, list[i]!, list[i + 1]!, list[i + 2]!, list[i + 3]!);
    }
    if (raster.isEmpty) return;
    if (!this.drewPaths) {
      this.context.putImageData(raster.toImageData(), 0, 0);
      return;
    }
    const layer = new OffscreenCanvas(size, size);
    layer.getContext('2d')!.putImageData(raster.toImageData(), 0, 0);
    this.context.drawImage(layer, 0, 0);
  }

  private draw(kind: Kind, colour: string, path: Path2D): void {
    this.drewPaths = true;
    const context = this.context;
    if (kind === 'fill') {
      context.fillStyle = this.palette.areaFill(colour);
      context.fill(path);
    } else if (kind === 'point') {
      context.fillStyle = colour;
      context.fill(path);
      context.lineWidth = this.widths.pointOutline;
      context.strokeStyle = this.palette.pointOutlineColour;
      context.stroke(path);
    } else {
      context.lineWidth = kind === 'line' ? this.widths.line : this.widths.areaOutline;
      context.strokeStyle = colour;
      context.stroke(path);
    }
  }
}

/**
 * Draws an MVT tile onto `context` (its canvas `size` device pixels square, `pixelRatio` device
 * pixels per CSS pixel), only the features `filter` passes, and says what the tile holds.
 */
export function drawOverviewTile(bytes: Uint8Array, context: CanvasRenderingContext2D, size: number, pixelRatio: number, palette: OverviewPalette, filter: OverviewFilter): OverviewTile {
  const result: OverviewTile = { own: 0, shared: [] };
  if (bytes.length === 0) return result;
  const pbf = new PbfReader(bytes);
  let layer: Layer | undefined;
  while (pbf.pos < pbf.length) {
    const tag = pbf.readVarint();
    if (tag >> 3 !== TILE_LAYERS) {
      pbf.skip(tag);
      continue;
    }
    const end = pbf.readVarint() + pbf.pos;
    const candidate = readLayer(pbf, end);
    pbf.pos = end;
    if (candidate.name === LAYER) layer = candidate;
  }
  if (!layer) return result;

  const { extent, keys } = layer;
  const scale = size / extent;
  const idKey = keys.indexOf('id');
  const kategorieKey = keys.indexOf('kategorie');
  // Decoded values, by index in the layer's value table: only those a feature's tags ask for.
  const decoded = new Array<unknown>(layer.values.length);
  const value = (index: number): unknown => {
    if (index >= decoded.length) return undefined;
    if (!(index in decoded)) {
      const at = pbf.pos;
      decoded[index] = decodeValue(pbf, layer!.values[index]!);
      pbf.pos = at;
    }
    return decoded[index];
  };
  const areaOutline = palette.areaOutline * pixelRatio;
  const radius = palette.pointRadius * pixelRatio;
  const batches = new Batches(context, palette, { areaOutline, line: palette.lineWidth * pixelRatio, pointOutline: palette.pointOutline * pixelRatio });
  // Vertices of the current feature in device pixels (x, y, x, y, …), reused from feature to feature.
  let vertices = new Float64Array(512);
  const ringStarts: number[] = [];
  const tags: number[] = [];
  const trace = (path: Path2D, closed: boolean) => {
    for (let r = 0; r + 1 < ringStarts.length; r++) {
      const start = ringStarts[r]!;
      const stop = ringStarts[r + 1]!;
      path.moveTo(vertices[2 * start]!, vertices[2 * start + 1]!);
      for (let i = start + 1; i < stop; i++) path.lineTo(vertices[2 * i]!, vertices[2 * i + 1]!);
      if (closed) path.closePath();
    }
  };

  // The hot loop reads its varints itself, from a local position: through PbfReader's methods (not
  // inlined there) they were about a third of drawing the whole city.
  for (const offset of layer.features) {
    let pos = offset;
    let length = 0;
    for (let shift = 0, b = 0x80; b >= 0x80; shift += 7) {
      b = bytes[pos++]!;
      length += (b & 0x7f) * 2 ** shift;
    }
    // Every loop below stops at the end of the bytes, however a tile lies about its lengths: a byte
    // past it reads as undefined, which ends a varint, and no length reaches past `end`.
    const end = Math.min(pos + length, bytes.length);
    let type = 0;
    tags.length = 0;
    let geometryStart = -1;
    let geometryEnd = -1;
    let numericId: number | undefined;
    while (pos < end) {
      const tag = bytes[pos++]!;
      const field = tag >> 3;
      if (tag >= 0x80 || (field !== FEATURE_TYPE && field !== FEATURE_TAGS && field !== FEATURE_GEOMETRY && field !== FEATURE_ID)) {
        // Anything else (an unknown field, or a field number over 15): PbfReader skips it.
        pbf.pos = pos - 1;
        pbf.skip(pbf.readVarint());
        pos = pbf.pos;
        continue;
      }
      let number = 0;
      for (let shift = 0, b = 0x80; b >= 0x80; shift += 7) {
        b = bytes[pos++]!;
        number += (b & 0x7f) * 2 ** shift;
      }
      if (field === FEATURE_TYPE) type = number;
      else if (field === FEATURE_ID) numericId = number;
      else if (field === FEATURE_TAGS) {
        const tagsEnd = Math.min(pos + number, end);
        while (pos < tagsEnd) {
          let item = 0;
          for (let shift = 0, b = 0x80; b >= 0x80; shift += 7) {
            b = bytes[pos++]!;
            item += (b & 0x7f) * 2 ** shift;
          }
          tags.push(item);
        }
      } else {
        geometryStart = pos;
        geometryEnd = Math.min(pos + number, end);
        pos = geometryEnd;
      }
    }
    if (geometryStart < 0 || type < GEOMETRY_POINT || type > GEOMETRY_POLYGON) continue;
    if (filter) {
      const properties: Record<string, unknown> = {};
      for (let t = 0; t + 1 < tags.length; t += 2) properties[keys[tags[t]!]!] = value(tags[t + 1]!);
      if (!filter(properties)) continue;
    }
    let kategorie: unknown;
    for (let t = 0; t + 1 < tags.length; t += 2) if (tags[t] === kategorieKey) kategorie = value(tags[t + 1]!);
    const colour = palette.colour(kategorie);

    // The geometry commands (MoveTo 1, LineTo 2, ClosePath 7; zig-zag deltas), in device pixels.
    pos = geometryStart;
    let n = 0;
    let cx = 0;
    let cy = 0;
    ringStarts.length = 0;
    let minX = Infinity;
    let minY = Infinity;
    let maxX = -Infinity;
    let maxY = -Infinity;
    while (pos < geometryEnd) {
      let command = 0;
      for (let shift = 0, b = 0x80; b >= 0x80; shift += 7) {
        b = bytes[pos++]!;
        command += (b & 0x7f) * 2 ** shift;
      }
      const id = command & 7;
      // At least two bytes a vertex: a count the bytes cannot hold is not believed.
      const count = Math.min(command >>> 3, (geometryEnd - pos) >> 1);
      if (id === 7) continue;
      if (id === 1) ringStarts.push(n);
      if (2 * (n + count) > vertices.length) {
        const grown = new Float64Array(Math.max(vertices.length * 2, 2 * (n + count)));
        grown.set(vertices);
        vertices = grown;
      }
      for (let c = 0; c < count; c++) {
        // Zig-zag deltas; a tile's coordinates fit in 32 bits (the extent plus its buffer).
        let dx = bytes[pos++]!;
        if (dx >= 0x80) {
          dx &= 0x7f;
          for (let shift = 7, b = 0x80; b >= 0x80; shift += 7) {
            b = bytes[pos++]!;
            dx |= (b & 0x7f) << shift;
          }
        }
        let dy = bytes[pos++]!;
        if (dy >= 0x80) {
          dy &= 0x7f;
          for (let shift = 7, b = 0x80; b >= 0x80; shift += 7) {
            b = bytes[pos++]!;
            dy |= (b & 0x7f) << shift;
          }
        }
        cx += (dx >>> 1) ^ -(dx & 1);
        cy += (dy >>> 1) ^ -(dy & 1);
        vertices[2 * n] = cx * scale;
        vertices[2 * n + 1] = cy * scale;
        n++;
        if (cx < minX) minX = cx;
        if (cx > maxX) maxX = cx;
        if (cy < minY) minY = cy;
        if (cy > maxY) maxY = cy;
      }
    }
    if (n === 0) continue;

    // Counted once per view (OverviewTile).
    if (minX >= 0 && minY >= 0 && maxX < extent && maxY < extent) result.own++;
    else if (maxX >= 0 && maxY >= 0 && minX < extent && minY < extent) {
      let id: unknown = numericId;
      for (let t = 0; t + 1 < tags.length; t += 2) if (tags[t] === idKey) id = value(tags[t + 1]!);
      if (id !== undefined) result.shared.push(String(id));
    }

    ringStarts.push(n);
    if (type === GEOMETRY_POINT) {
      const path = batches.path('point', colour);
      for (let i = 0; i < n; i++) {
        const [x, y] = [vertices[2 * i]!, vertices[2 * i + 1]!];
        path.moveTo(x + radius, y);
        path.arc(x, y, radius, 0, 2 * Math.PI);
      }
      continue;
    }
    if (type === GEOMETRY_LINE) trace(batches.path('line', colour), false);
    // An area no wider than its outline is the outline alone (lib/map.ts tileAreaStyle says why).
    else if (Math.min(maxX - minX, maxY - minY) * scale <= areaOutline) batches.rectangle(colour, minX * scale, minY * scale, (maxX - minX) * scale, (maxY - minY) * scale);
    else {
      trace(batches.path('fill', colour), true);
      trace(batches.path('outline', colour), true);
    }
  }

  batches.finish(size);
  return result;
}
