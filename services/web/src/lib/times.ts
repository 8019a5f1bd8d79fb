/**
 * Times as a reader reads them. The API speaks UTC (ISO 8601); a page rendered on the server does not
 * know the reader's time zone, so it says how long ("in 9 minutes") and leaves clock times to the
 * browser, which formats them in its own zone and language.
 */

/** "19:45, in 9 Minuten": the clock time in the browser's zone and how far away it is. */
export function clockAndRelative(iso: string, lang: string, now = Date.now()): string {
  const at = Date.parse(iso);
  if (Number.isNaN(at)) return iso;
  const clock = new Intl.DateTimeFormat(lang, { hour: '2-digit', minute: '2-digit' }).format(at);
  return `${clock}, ${new Intl.RelativeTimeFormat(lang, { numeric: 'auto' }).format(Math.round((at - now) / 60_000), 'minute')}`;
}

/** Whole minutes from now until the time (0 when past), for server-rendered lines. */
export const minutesUntil = (iso: string, now = Date.now()): number => Math.max(0, Math.round((Date.parse(iso) - now) / 60_000));
