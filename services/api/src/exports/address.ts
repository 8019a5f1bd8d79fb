/**
 * How the single `adresse` string becomes OSM addr:* tags.
 *
 * A German postal address of the form "Street 12, 12345 City" (house number with an optional letter
 * or range such as 12a or 12-14, five-digit postcode) is split into addr:street, addr:housenumber,
 * addr:postcode and addr:city. Anything else is kept whole in addr:full, because guessing the parts of
 * an address we cannot parse would put wrong data on the map.
 */
const GERMAN_ADDRESS = /^(?<street>\S.*?)\s+(?<housenumber>\d+\s?[a-zA-Z]?(?:\s?[-/]\s?\d+\s?[a-zA-Z]?)?)\s*,\s*(?<postcode>\d{5})\s+(?<city>\S.*)$/u;

export function addressTags(adresse: string | null | undefined): Record<string, string> {
  const value = adresse?.replace(/\s+/g, ' ').trim();
  if (!value) return {};
  const match = GERMAN_ADDRESS.exec(value);
  if (!match?.groups) return { 'addr:full': value };
  const { street, housenumber, postcode, city } = match.groups as Record<'street' | 'housenumber' | 'postcode' | 'city', string>;
  return {
    'addr:street': street.trim(),
    'addr:housenumber': housenumber.replace(/\s+/g, ''),
    'addr:postcode': postcode,
    'addr:city': city.trim(),
  };
}
