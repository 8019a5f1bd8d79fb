import { createHash } from 'node:crypto';

/**
 * Server-side HTML with escaping by construction: `html` escapes every interpolated value unless it is
 * itself a `SafeHtml` built by `html`. No client script, no CDN; plain forms that work without JS.
 */
export class SafeHtml {
  constructor(readonly value: string) {}
  toString(): string {
    return this.value;
  }
}

const ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;', '`': '&#96;' };

export function escapeHtml(text: string): string {
  return text.replace(/[&<>"'`]/g, (c) => ESCAPES[c] as string);
}

type Interpolation = SafeHtml | string | number | boolean | null | undefined | Interpolation[];

function render(value: Interpolation): string {
  if (value === null || value === undefined || value === false) return '';
  if (value instanceof SafeHtml) return value.value;
  if (Array.isArray(value)) return value.map(render).join('');
  return escapeHtml(String(value));
}

export function html(strings: TemplateStringsArray, ...values: Interpolation[]): SafeHtml {
  let out = strings[0] ?? '';
  values.forEach((value, i) => {
    out += render(value) + (strings[i + 1] ?? '');
  });
  return new SafeHtml(out);
}

const STYLE = `body{font-family:system-ui,sans-serif;max-width:32rem;margin:2rem auto;padding:0 1rem;line-height:1.5;color:#1a1a1a}
label{display:block;margin-top:1rem;font-weight:600}input[type=text],input[type=email],input[type=password]{width:100%;padding:.5rem;font-size:1rem;border:1px solid #555;border-radius:4px}
button{margin-top:1rem;margin-right:.5rem;padding:.5rem 1rem;font-size:1rem;border-radius:4px;border:1px solid #1a4d8f;background:#1a4d8f;color:#fff}
button.secondary{background:#fff;color:#1a4d8f}:focus-visible{outline:3px solid #e07b00;outline-offset:2px}
.error{color:#a40000;border-left:4px solid #a40000;padding-left:.5rem}ul.scopes{padding-left:1.2rem}`;

/** For the Content-Security-Policy: the one inline style block is allowed by its hash, nothing else inline. */
export const STYLE_CSP_SOURCE = `'sha256-${createHash('sha256').update(STYLE).digest('base64')}'`;

export function page(title: string, body: SafeHtml): string {
  return html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${title}</title>
<style>${new SafeHtml(STYLE)}</style>
</head>
<body>
<main>
<h1>${title}</h1>
${body}
</main>
</body>
</html>`.value;
}

export function errorPage(title: string, message: string): string {
  return page(title, html`<p class="error" role="alert">${message}</p>`);
}
