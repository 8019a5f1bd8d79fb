/**
 * Axis-aligned rectangles painted into pixels by arithmetic, for the overview (lib/overview-tiles.ts),
 * where a dense tile at zoom 7 is some 28 000 areas no wider than their outline, each drawn as one
 * rectangle of a few pixels. Through the canvas that is one fillRect call each, about 1.7 µs apiece
 * in Chromium: four fifths of drawing such a tile once its bytes were read directly. Here each
 * rectangle is a few multiply-adds per pixel it touches, and the tile gets one putImageData.
 *
 * The result is what fillRect draws with anti-aliasing, within a step or two of 255 per channel
 * (test/overview-drawing.test.ts compares them in Chromium): a pixel's coverage is the share of its area the
 * rectangle covers (the product of the horizontal and vertical overlaps, exact for an axis-aligned
 * rectangle), and colours are composited source-over in premultiplied floating point, as the canvas
 * does in eight-bit steps.
 *
 * It imports nothing, so a browser test can load it on its own.
 */
export class RectangleRaster {
  /** Premultiplied red, green, blue and alpha of each pixel, 0–1, row by row. */
  private readonly pixels: Float32Array;
  private painted = false;

  constructor(readonly size: number) {
    this.pixels = new Float32Array(size * size * 4);
  }

  /** Whether any rectangle touched a pixel. */
  get isEmpty(): boolean {
    return !this.painted;
  }

  /**
   * Paints the rectangle (x, y, width, height, in pixels, fractions allowed; the part outside the
   * raster is dropped) in the colour red, green, blue (0–255) with opacity alpha (0–1), over what is there.
   */
  fill(red: number, green: number, blue: number, alpha: number, x: number, y: number, width: number, height: number): void {
    const size = this.size;
    const left = Math.max(0, x);
    const right = Math.min(size, x + width);
    const top = Math.max(0, y);
    const bottom = Math.min(size, y + height);
    if (!(left < right && top < bottom && alpha > 0)) return;
    this.painted = true;
    const r = (red / 255) * alpha;
    const g = (green / 255) * alpha;
    const b = (blue / 255) * alpha;
    const pixels = this.pixels;
    const lastColumn = Math.ceil(right) - 1;
    const lastRow = Math.ceil(bottom) - 1;
    for (let row = Math.floor(top); row <= lastRow; row++) {
      const rowCover = Math.min(bottom, row + 1) - Math.max(top, row);
      let at = (row * size + Math.floor(left)) * 4;
      for (let column = Math.floor(left); column <= lastColumn; column++, at += 4) {
        const cover = rowCover * (Math.min(right, column + 1) - Math.max(left, column));
        const keep = 1 - alpha * cover;
        pixels[at] = r * cover + pixels[at]! * keep;
        pixels[at + 1] = g * cover + pixels[at + 1]! * keep;
        pixels[at + 2] = b * cover + pixels[at + 2]! * keep;
        pixels[at + 3] = alpha * cover + pixels[at + 3]! * keep;
      }
    }
  }

  /** The pixels as ImageData wants them: eight bits a channel, not premultiplied. */
  toImageData(): ImageData {
    const image = new ImageData(this.size, this.size);
    const data = image.data;
    const pixels = this.pixels;
    for (let at = 0; at < pixels.length; at += 4) {
      const alpha = pixels[at + 3]!;
      if (alpha === 0) continue;
      const unpremultiply = 255 / alpha;
      // Uint8ClampedArray rounds and clamps.
      data[at] = pixels[at]! * unpremultiply;
      data[at + 1] = pixels[at + 1]! * unpremultiply;
      data[at + 2] = pixels[at + 2]! * unpremultiply;
      data[at + 3] = alpha * 255;
    }
    return image;
  }
}

/**
 * A canvas colour as red, green, blue (0–255) and alpha (0–1), read back from the context, which
 * writes any colour it accepts as `#rrggbb` (opaque) or `rgba(r, g, b, a)`. Undefined for anything
 * else (a gradient or pattern).
 */
export function canvasColour(context: { fillStyle: unknown }, colour: string): [number, number, number, number] | undefined {
  context.fillStyle = colour;
  const normal = String(context.fillStyle);
  const hex = /^#([0-9a-f]{2})([0-9a-f]{2})([0-9a-f]{2})$/i.exec(normal);
  if (hex) return [parseInt(hex[1]!, 16), parseInt(hex[2]!, 16), parseInt(hex[3]!, 16), 1];
  const rgba = /^rgba?\(\s*([\d.]+),\s*([\d.]+),\s*([\d.]+)(?:,\s*([\d.]+))?\s*\)$/.exec(normal);
  if (rgba) return [Number(rgba[1]), Number(rgba[2]), Number(rgba[3]), rgba[4] === undefined ? 1 : Number(rgba[4])];
  return undefined;
}
