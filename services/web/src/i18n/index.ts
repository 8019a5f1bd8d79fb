import { de } from './de.js';
import { en } from './en.js';

/** The catalogues. Every visible string comes from here; components never carry literals. */
export const LANGUAGES = ['de', 'en'] as const;
export type Lang = (typeof LANGUAGES)[number];
export type MessageKey = keyof typeof de;
export type Messages = Record<MessageKey, string>;

const catalogues: Record<Lang, Messages> = { de, en };

export function messagesFor(lang: Lang): Messages {
  return catalogues[lang];
}

/** A translator: `t('map.loaded', { count: 3 })`. */
export type Translate = (key: MessageKey, values?: Record<string, string | number>) => string;

export function translator(messages: Messages): Translate {
  return (key, values) => {
    const template = messages[key] ?? key;
    return values ? template.replace(/\{(\w+)\}/g, (_, name: string) => String(values[name] ?? `{${name}}`)) : template;
  };
}

export function isLang(value: unknown): value is Lang {
  return typeof value === 'string' && (LANGUAGES as readonly string[]).includes(value);
}

/**
 * The language of a request: an explicit choice (?lang= or the cookie it sets) wins, then the
 * browser's Accept-Language by quality, then German.
 */
export function pickLanguage(choice: string | null | undefined, acceptLanguage: string | null | undefined): Lang {
  if (isLang(choice)) return choice;
  const ranked = (acceptLanguage ?? '')
    .split(',')
    .map((part) => {
      const [tag = '', ...params] = part.trim().split(';');
      const q = params.map((p) => p.trim()).find((p) => p.startsWith('q='));
      return { lang: tag.toLowerCase().split('-')[0] ?? '', q: q ? Number(q.slice(2)) : 1 };
    })
    .filter((entry) => entry.lang && Number.isFinite(entry.q) && entry.q > 0)
    .sort((a, b) => b.q - a.q);
  for (const entry of ranked) if (isLang(entry.lang)) return entry.lang;
  return 'de';
}
