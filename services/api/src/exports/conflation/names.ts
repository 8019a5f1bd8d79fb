/**
 * Name similarity for conflation, on normalised tokens:
 *
 * - case, umlauts and ß ("Südfriedhof" = "Suedfriedhof" = "SÜDFRIEDHOF"), hyphens and spaces
 *   ("Süd-Friedhof"), word order ("Friedhof Neuhof" = "Neuhof Friedhof");
 * - abbreviations, inside words too: "Lindenstr." = "Lindenstraße", "St. Marien" = "Sankt Marien",
 *   "Pl." = "Platz";
 * - generic words of the categories (friedhof, denkmal, …) are split off compounds
 *   ("Annenfriedhof" → annen + friedhof) and set aside: every cemetery shares them.
 *
 * The distinctive tokens of two names are compared as sets (a soft Dice coefficient: a token matches
 * one of the other name exactly, or by character bigrams at 0.8 or more for typos; numbers only
 * exactly). So "Alter Friedhof" ~ "Alter Annenfriedhof" is 0.67 (annen is unmatched): weak, a
 * reviewer decides, where a substring rule had called it strong; "Nordfriedhof" ~ "Südfriedhof" is 0.
 */
const GENERIC = [
  'friedhof', 'friedhoefe', 'kirchhof', 'gottesacker', 'begraebnisplatz', 'begraebnisstaette', 'grabfeld', 'waldfriedhof',
  'denkmal', 'ehrenmal', 'mahnmal', 'gedenkstein', 'gedenkstaette', 'gedenktafel', 'monument', 'memorial', 'cemetery', 'graveyard',
  'blumenbeet', 'beet', 'rabatte',
];
// Longest first, so "begraebnisstaette" is split off before "staette" could be.
const GENERIC_SUFFIXES = [...GENERIC].sort((a, b) => b.length - a.length);
const GENERIC_SET = new Set(GENERIC);
/** Generic words naming the same kind of thing: a Gedenktafel is not a Denkmal, a Kirchhof is a Friedhof. */
const KINDS: readonly (readonly string[])[] = [
  ['friedhof', 'friedhoefe', 'kirchhof', 'gottesacker', 'begraebnisplatz', 'begraebnisstaette', 'grabfeld', 'waldfriedhof', 'cemetery', 'graveyard'],
  ['denkmal', 'ehrenmal', 'mahnmal', 'monument', 'memorial', 'gedenkstaette'],
  ['gedenkstein', 'gedenktafel'],
  ['blumenbeet', 'beet', 'rabatte'],
];
const kindsOf = (tokens: string[]) => new Set(tokens.flatMap((t) => KINDS.flatMap((k, i) => (k.includes(t) ? [i] : []))));
/** Words that tell two places apart ("Alter" and "Neuer Johannisfriedhof"): never a mere qualifier. */
const MODIFIERS = new Set(['alt', 'alte', 'alter', 'altes', 'neu', 'neue', 'neuer', 'neues', 'ehemalige', 'ehemaliger', 'ehemaliges', 'klein', 'kleine', 'kleiner', 'gross', 'grosse', 'grosser', 'obere', 'oberer', 'untere', 'unterer', 'nord', 'sued', 'ost', 'west', 'erste', 'erster', 'zweite', 'zweiter', 'juedischer', 'israelitischer', 'katholischer', 'evangelischer']);
const STOP_WORDS = new Set(['der', 'die', 'das', 'dem', 'den', 'des', 'am', 'an', 'im', 'in', 'zum', 'zur', 'von', 'vom', 'und', 'auf', 'bei', 'fuer', 'the', 'of']);

/** Lower case, umlauts transliterated, abbreviations written out (inside words too), other marks gone. */
export function normaliseName(name: string): string {
  return name
    .toLowerCase()
    .normalize('NFC')
    .replace(/ä/g, 'ae')
    .replace(/ö/g, 'oe')
    .replace(/ü/g, 'ue')
    .replace(/ß/g, 'ss')
    .replace(/str\.(?=\s|$|[-,;)])/g, 'strasse ')
    .replace(/(^|[\s(-])st\.\s*/g, '$1sankt ')
    .replace(/(^|[\s(-])st(?=\s)/g, '$1sankt')
    .replace(/pl\.(?=\s|$)/g, 'platz ')
    .normalize('NFKD')
    .replace(/[\u0300-\u036f]/g, '')
    .replace(/[^a-z0-9]+/g, ' ')
    .trim();
}

/** The tokens of a name, compounds with a generic word split: "Alter Annenfriedhof" → alter, annen, friedhof. */
export function nameTokens(name: string): string[] {
  const out: string[] = [];
  for (const token of normaliseName(name).split(' ')) {
    if (!token) continue;
    const generic = GENERIC_SUFFIXES.find((g) => token.length > g.length + 2 && token.endsWith(g));
    if (generic) {
      // "suedfriedhof" → sued + friedhof; a joining s ("friedhofs…") stays with the word before.
      out.push(token.slice(0, -generic.length).replace(/-$/, ''), generic);
    } else out.push(token);
  }
  return out;
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

/** How well two tokens match: exactly 1; a typo (bigram Dice ≥ 0.8 on words of 5+ letters); numbers only exactly. */
function tokenMatch(a: string, b: string): number {
  if (a === b) return 1;
  if (/\d/.test(a) || /\d/.test(b) || a.length < 5 || b.length < 5) return 0;
  const d = dice(a, b);
  return d >= 0.8 ? d : 0;
}

/** Soft Dice over two token sets: each token's best match, greedily one-to-one. */
function tokenDice(a: string[], b: string[]): number {
  if (a.length === 0 && b.length === 0) return 1;
  const pairs: { i: number; j: number; s: number }[] = [];
  a.forEach((x, i) => b.forEach((y, j) => {
    const s = tokenMatch(x, y);
    if (s > 0) pairs.push({ i, j, s });
  }));
  pairs.sort((p, q) => q.s - p.s);
  const usedA = new Set<number>();
  const usedB = new Set<number>();
  let sum = 0;
  for (const p of pairs) {
    if (usedA.has(p.i) || usedB.has(p.j)) continue;
    usedA.add(p.i);
    usedB.add(p.j);
    sum += p.s;
  }
  return (2 * sum) / (a.length + b.length);
}

/**
 * The word a name is about: the one before its first generic word ("Annen" in "Alter
 * Annenfriedhof", "West" in "Westfriedhof Leipzig"), or its last word when the generic word comes
 * first ("Schönefeld" in "Friedhof Leipzig-Schönefeld"); null without a generic word.
 */
function headOf(tokens: string[]): string | null {
  const first = tokens.findIndex((t) => GENERIC_SET.has(t));
  if (first > 0) return tokens[first - 1]!;
  if (first === 0) return [...tokens].reverse().find((t) => !GENERIC_SET.has(t) && !STOP_WORDS.has(t)) ?? null;
  return null;
}

/**
 * 0..1. The distinctive tokens (neither generic nor stop words) compared as sets (soft Dice), and:
 * - written together or apart alike: "Napoleon-Stein" = "Napoleonstein" (0.95);
 * - a qualified name: when one name's tokens are all in the other's, both are about the same word
 *   (headOf) and the extra words are neither numbers nor modifiers ("Westfriedhof Leipzig" ~
 *   "Westfriedhof", "Sowjetisches Ehrenmal Südfriedhof" ~ "Sowjetisches Ehrenmal"): 0.85. Not
 *   "Alter Friedhof" ~ "Alter Annenfriedhof" (about alter vs annen), not "Kriegerdenkmal" ~
 *   "Kriegerdenkmal 1870/71" (a number), not "Johannisfriedhof" ~ "Neuer Johannisfriedhof".
 * Two names with nothing distinctive compare their generic words ("Friedhof" ~ "Friedhof" 0.9); a
 * generic name and a distinctive one are 0.5 ("Friedhof" ~ "Südfriedhof": weak, a reviewer decides).
 */
export function nameSimilarity(a: string, b: string): number {
  const ta = nameTokens(a);
  const tb = nameTokens(b);
  if (ta.length === 0 || tb.length === 0) return 0;
  const distinctive = (t: string[]) => [...new Set(t.filter((x) => !GENERIC_SET.has(x) && !STOP_WORDS.has(x)))];
  const da = distinctive(ta);
  const db = distinctive(tb);
  if (da.length === 0 && db.length === 0) return tokenDice([...new Set(ta)], [...new Set(tb)]) === 1 ? 0.9 : 0.3;
  // A generic name ("Friedhof") next to a distinctive one: maybe the same place, never sure.
  if (da.length === 0 || db.length === 0) return 0.5;
  // Two names of different kinds of thing ("Bachdenkmal", "Gedenktafel Bach") are two objects.
  const ka = kindsOf(ta);
  const kb = kindsOf(tb);
  const kind = ka.size > 0 && kb.size > 0 && ![...ka].some((k) => kb.has(k)) ? 0.6 : 1;
  const soft = tokenDice(da, db);
  if (soft === 1) return kind;
  if (da.join('') === db.join('')) return 0.95 * kind;
  const [small, large, largeTokens] = da.length <= db.length ? [da, db, tb] : [db, da, ta];
  const extra = large.filter((t) => !small.includes(t));
  const headA = headOf(ta);
  // A modifier that names a place after the name proper ("… Ehrenmal Südfriedhof": where it stands) qualifies too.
  const firstGeneric = largeTokens.findIndex((t) => GENERIC_SET.has(t));
  const placeQualifier = (t: string) => {
    const i = largeTokens.indexOf(t);
    return firstGeneric >= 0 && i > firstGeneric && GENERIC_SET.has(largeTokens[i + 1] ?? '');
  };
  const qualified = small.every((t) => large.includes(t)) && headA !== null && headA === headOf(tb) && extra.every((t) => !/\d/.test(t) && (!MODIFIERS.has(t) || placeQualifier(t)));
  return Number((Math.max(soft, qualified ? 0.85 : 0) * kind).toFixed(4));
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

/** Whether `theirs` names everything `ours` does and more ("Kriegerdenkmal 1870/71" for "Kriegerdenkmal"): maybe the fuller name of the same object. */
export function extendsName(ours: string, theirs: string): boolean {
  const distinctive = (name: string) => [...new Set(nameTokens(name).filter((x) => !GENERIC_SET.has(x) && !STOP_WORDS.has(x)))];
  const a = distinctive(ours);
  const b = distinctive(theirs);
  return a.length > 0 && b.length > a.length && a.every((t) => b.includes(t));
}
