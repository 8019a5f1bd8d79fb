import type { ConvertedFile, SourceRow } from './convert.js';

/**
 * A demo city of DEMO_FEATURES features around Berlin-Mitte for `npm run seed` and the import page's
 * "Load demo data" (development only): cemeteries as polygons (some of two parts), flower beds as
 * polygons, points and rows (lines), monuments as points; German names, street addresses and phone
 * numbers; the same city every time (a seeded generator). It goes through the import service like a
 * file, so it is validated and written as any import.
 */
export const DEMO_FEATURES = 1_000;
const CENTRE = [13.404, 52.52] as const;

const STREETS = ['Invalidenstraße', 'Torstraße', 'Chausseestraße', 'Brunnenstraße', 'Rosenthaler Straße', 'Linienstraße', 'Auguststraße', 'Friedrichstraße', 'Unter den Linden', 'Karl-Liebknecht-Straße', 'Alexanderstraße', 'Greifswalder Straße', 'Prenzlauer Allee', 'Schönhauser Allee', 'Kastanienallee', 'Bernauer Straße', 'Ackerstraße', 'Gartenstraße', 'Oranienburger Straße', 'Leipziger Straße'];
const SAINTS = ['St. Marien', 'St. Hedwig', 'Sophien', 'Dorotheenstädtischer', 'Französischer', 'Elisabeth', 'Georgen-Parochial', 'Golgatha', 'Invaliden', 'Luisenstädtischer', 'Dreifaltigkeits', 'St. Matthäus', 'Jerusalems', 'Friedrichswerder', 'Nikolai'];
const FLOWERS = ['Rosen', 'Tulpen', 'Dahlien', 'Lavendel', 'Stauden', 'Sommerblumen', 'Narzissen', 'Astern', 'Kräuter', 'Wildblumen'];
const PEOPLE = ['Karl Friedrich Schinkel', 'Heinrich Heine', 'Rosa Luxemburg', 'Theodor Fontane', 'Käthe Kollwitz', 'Alexander von Humboldt', 'Bertolt Brecht', 'Marlene Dietrich', 'Otto Lilienthal', 'Rudolf Virchow', 'Lise Meitner', 'Max Planck', 'Albert Einstein', 'Hannah Arendt', 'Gotthold Ephraim Lessing'];
const MONUMENTS = ['Denkmal für', 'Gedenkstein für', 'Büste von', 'Gedenktafel für', 'Brunnen für'];

/** mulberry32: a small seeded generator, so the demo city is the same on every machine. */
function generator(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export function demoCity(count = DEMO_FEATURES): ConvertedFile {
  const random = generator(2026);
  const pick = <T>(list: readonly T[]): T => list[Math.floor(random() * list.length)]!;
  const round = (n: number) => Number(n.toFixed(7));
  // A spot in a 6 × 4 km box around the centre.
  const spot = (): [number, number] => [round(CENTRE[0] + (random() - 0.5) * 0.09), round(CENTRE[1] + (random() - 0.5) * 0.036)];
  const box = ([x, y]: [number, number], w: number, h: number) => [[[x, y], [round(x + w), y], [round(x + w), round(y + h)], [x, round(y + h)], [x, y]]];
  const rows: SourceRow[] = [];
  for (let i = 0; i < count; i++) {
    const kind = random();
    const street = pick(STREETS);
    const attributes: Record<string, unknown> = {
      adresse: `${street} ${1 + Math.floor(random() * 180)}, 10${115 + Math.floor(random() * 20)} Berlin`,
      telefon: random() < 0.4 ? `+49 30 ${200 + Math.floor(random() * 700)} ${1000 + Math.floor(random() * 9000)}` : null,
    };
    let geometry: SourceRow['geometry'];
    if (kind < 0.2) {
      attributes.kategorie = 'friedhof';
      attributes.name = `${pick(SAINTS)}-Friedhof ${i % 7 === 0 ? 'II' : ''}`.trim();
      const corner = spot();
      const [w, h] = [0.002 + random() * 0.004, 0.0012 + random() * 0.0025];
      geometry = random() < 0.2
        ? { type: 'MultiPolygon', coordinates: [box(corner, w, h), box([round(corner[0] + w + 0.001), corner[1]], w / 2, h / 2)] }
        : { type: 'Polygon', coordinates: box(corner, w, h) };
    } else if (kind < 0.6) {
      attributes.kategorie = 'blumenbeet';
      const flower = pick(FLOWERS);
      const at = spot();
      const shape = random();
      if (shape < 0.5) {
        attributes.name = `${flower}beet ${street}`;
        geometry = { type: 'Polygon', coordinates: box(at, 0.0002 + random() * 0.0004, 0.0001 + random() * 0.0002) };
      } else if (shape < 0.8) {
        attributes.name = `${flower}kübel ${street}`;
        geometry = { type: 'Point', coordinates: at };
      } else {
        attributes.name = `${flower}rabatte ${street}`;
        geometry = { type: 'LineString', coordinates: [at, [round(at[0] + 0.0008 * random() + 0.0002), round(at[1] + 0.0004 * (random() - 0.5))], [round(at[0] + 0.0012 + 0.0006 * random()), round(at[1] + 0.0004 * (random() - 0.5))]] };
      }
    } else {
      attributes.kategorie = 'denkmal';
      attributes.name = `${pick(MONUMENTS)} ${pick(PEOPLE)}`;
      geometry = { type: 'Point', coordinates: spot() };
    }
    rows.push({ row: i + 1, geometry, attributes });
  }
  return { format: 'geojson', layer: 'demo-city', fields: ['name', 'kategorie', 'adresse', 'telefon'], rows };
}
