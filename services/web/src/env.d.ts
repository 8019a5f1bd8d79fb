/// <reference types="astro/client" />

declare namespace App {
  interface Locals {
    lang: import('./i18n/index.js').Lang;
    t: import('./i18n/index.js').Translate;
    messages: import('./i18n/index.js').Messages;
    visitor: import('./lib/session.js').Visitor;
    user: import('./lib/session.js').SignedInUser | undefined;
    config: import('./config.js').WebConfig;
  }
}
