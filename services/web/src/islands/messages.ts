import { translator, type Messages, type Translate } from '../i18n/index.js';

/** The catalogue of the page's language, handed over by the server (Layout.astro). */
export function clientTranslator(): Translate {
  const element = document.getElementById('fp-messages');
  return translator(JSON.parse(element?.textContent ?? '{}') as Messages);
}
