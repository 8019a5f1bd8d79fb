/**
 * Name similarity for conflation: "Südfriedhof", "Suedfriedhof" and "Süd-Friedhof" are one name;
 * "Johannisfriedhof" and "Alter Johannisfriedhof" are close; "Nordfriedhof" and "Südfriedhof" are
 * not (they share only the category word, which is why generic category words are set aside before
 * the distinctive rest is compared on character bigrams).
 */
const TRANSLITERATION: [RegExp, string][] = [
  [/ä/g, 'ae'],
  [/ö/g, 'oe'],
  [/ü/g, 'ue'],
  [/ß/g, 'ss'],
  [/\bst\.\s*/g, 'sankt '],
  [/\bstr\.\s*/g, 'strasse '],
];

/** Generic words of the categories: shared by every cemetery, so they must not make two names alike. */
const GENERIC = /(friedhof|kirchhof|gottesacker|begraebnisplatz|denkmal|ehrenmal|mahnmal|gedenkstein|blumenbeet|beet|cemetery|memorial|monument)/g;

export function normaliseName(name: string): string {
  let s = name.toLowerCase().normalize('NFC');
  for (const [pattern, replacement] of TRANSLITERATION) s = s.replace(pattern, replacement);
  return s.normalize('NFKD').replace(/[\u0300-\u036f]/g, '').replace(/[^a-z0-9]+/g, '');
}

function bigrams(s: string): Map<string, number> {
  const out = new Map<string, number>();
  for (let i = 0; i < s.length - 1; i++) {
    const g = s.slice(i, i + 2);
    out.set(g, (out.get(g) ?? 0) + 1);
  }
  return out;
}

function dice(a: string, b: string): number {
  if (a === b) return 1;
  if (a.length < 2 || b.length < 2) return 0;
  const ga = bigrams(a);
  const gb = bigrams(b);
  let shared = 0;
  for (const [g, n] of ga) shared += Math.min(n, gb.get(g) ?? 0);
  return (2 * shared) / (a.length - 1 + (b.length - 1));
}

/**
 * 0..1. Identical after normalisation → 1. Otherwise the Dice coefficient of the distinctive part
 * (generic category words removed), falling back to the whole name when nothing distinctive is left.
 */
export function nameSimilarity(a: string, b: string): number {
  const na = normaliseName(a);
  const nb = normaliseName(b);
  if (na.length === 0 || nb.length === 0) return 0;
  if (na === nb) return 1;
  const da = na.replace(GENERIC, '');
  const db = nb.replace(GENERIC, '');
  if (da.length >= 3 && db.length >= 3) {
    if (da === db) return 0.95;
    // One distinctive part inside the other ("johannis" in "alterjohannis") is a strong hint.
    const contained = da.includes(db) || db.includes(da) ? 0.85 : 0;
    return Math.max(contained, dice(da, db));
  }
  if (da.length < 3 && db.length < 3) return dice(na, nb);
  return Math.min(0.4, dice(na, nb));
}

/** The names an OSM element (or a Wikidata label set) is known by. */
export function namesOf(tags: Record<string, string>): string[] {
  const keys = ['name', 'name:de', 'official_name', 'alt_name', 'old_name', 'short_name', 'loc_name'];
  return keys.flatMap((k) => (tags[k] ? tags[k]!.split(';').map((v) => v.trim()).filter(Boolean) : []));
}

/** The best similarity between `name` and any of `names`; null when there is none. */
export function bestNameSimilarity(name: string, names: string[]): number | null {
  if (names.length === 0) return null;
  return Math.max(...names.map((n) => nameSimilarity(name, n)));
}
