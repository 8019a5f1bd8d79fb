/**
 * Values as OSM mappers write them: the feature's fields are typed by clerks ("Hauptstr.",
 * "0345 6789-0", "NEUER FRIEDHOF"); on OSM they read "Hauptstraße", "+49 345 67890", "Neuer Friedhof".
 * Each function changes a value only when the rule is unambiguous and returns it untouched otherwise;
 * nothing here guesses (an acronym in a name in capitals keeps the whole name as typed).
 */

/** "Hauptstr." → "Hauptstraße", "Lindenstr. " → "Lindenstraße", "Str. des 17. Juni" → "Straße des 17. Juni". */
export function normaliseStreet(street: string): string {
  return street
    .replace(/\s+/g, ' ')
    .trim()
    .replace(/(\p{L})str\.(?=\s|$)/gu, '$1straße')
    .replace(/(^|[\s-])Str\.(?=\s|$)/gu, '$1Straße')
    .replace(/(^|[\s-])str\.(?=\s|$)/gu, '$1straße');
}

/** Words written in lower case inside a German name in title case. */
const LOWER_WORDS = new Set(['am', 'an', 'auf', 'aus', 'bei', 'beim', 'dem', 'den', 'der', 'des', 'die', 'das', 'für', 'im', 'in', 'und', 'unter', 'vom', 'von', 'vor', 'zu', 'zum', 'zur', 'über']);
/** Short words that are ordinary words, not acronyms, in capitals. */
const SHORT_WORDS = new Set(['alt', 'neu', 'ost', 'süd', 'see', 'tor', 'hof', 'weg', 'st.', 'ehem.']);

/**
 * A name typed in capitals to title case, when that is safe: every letter is upper case, and every
 * word of up to three letters is a known word (a German article or preposition, "Alt", "St." …).
 * "NEUER FRIEDHOF AM WALL" → "Neuer Friedhof am Wall"; "DENKMAL DER SED" stays as typed (SED is an
 * acronym), so does any name with a lower-case letter.
 */
export function normaliseNameCase(name: string): string {
  const trimmed = name.replace(/\s+/g, ' ').trim();
  const letters = trimmed.replace(/[^\p{L}]/gu, '');
  if (letters.length < 4 || letters !== letters.toLocaleUpperCase('de-DE')) return trimmed;
  const words = trimmed.split(' ');
  const lowerWords = words.map((w) => w.toLocaleLowerCase('de-DE'));
  const safe = lowerWords.flatMap((w) => w.split(/[-/]/)).every((w) => {
    const bare = w.replace(/[^\p{L}.]/gu, '');
    return bare.replace(/\./g, '').length > 3 || LOWER_WORDS.has(bare) || SHORT_WORDS.has(bare) || bare.length === 0;
  });
  if (!safe) return trimmed;
  return lowerWords
    .map((w, i) => {
      if (i > 0 && LOWER_WORDS.has(w)) return w;
      // Capitalise after the start and after a hyphen: "SÜD-OST" → "Süd-Ost".
      return w.replace(/(^|[-/(„"])(\p{L})/gu, (_m, before: string, letter: string) => before + letter.toLocaleUpperCase('de-DE'));
    })
    .join(' ');
}

/**
 * One German telephone number in the international form OSM asks for (`phone=*`: "+49 345 67890").
 * The group the clerk separated first is taken as the area code ("0345 6789-0", "(0345) 67890",
 * "0345/67890"); without a separator the digits follow "+49 " unsplit. Anything that is not a
 * German number of 6 to 15 digits is returned untouched.
 */
export function normalisePhone(raw: string): string {
  const value = raw.replace(/\s+/g, ' ').trim();
  if (!/^[+\d\s()/.-]+$/.test(value)) return value;
  let national: string;
  // Already international: as written, unless it carries the trunk zero ("+49 (0)345 …").
  if (value.startsWith('+') && !/\(0\)/.test(value)) return value;
  if (value.startsWith('+49')) national = value.slice(3);
  else if (value.startsWith('0049')) national = value.slice(4);
  else if (value.startsWith('+')) return value; // another country: as written
  else if (/^\(?0[1-9]/.test(value)) national = value.replace('0', '');
  else return value; // no area code: cannot be made international
  national = national.trim().replace(/^\(0\)\s*/, '').replace(/^0/, '');
  const digits = national.replace(/\D/g, '');
  if (digits.length < 5 || digits.length > 13 || digits.startsWith('0')) return value;
  const grouped = /^\(?(\d{2,5})\)?[\s/.-]+(\d[\d\s/.-]*)$/.exec(national);
  return grouped ? `+49 ${grouped[1]} ${grouped[2]!.replace(/\D/g, '')}` : `+49 ${digits}`;
}

/** Several numbers ("; " or "," separated) each normalised, joined as OSM separates values. */
export function normalisePhones(raw: string): string {
  return raw
    .split(/\s*[;,]\s*/)
    .filter((p) => p.length > 0)
    .map(normalisePhone)
    .join('; ');
}
