/**
 * A minimal browser for flow tests: a cookie jar (one host, as every server here is 127.0.0.1, which is
 * how cookies behave across ports and how the parent-domain cookie behaves across subdomains), manual
 * redirect following, and submission of the app's HTML forms as a user would (hidden fields included).
 */

export interface Hop {
  method: string;
  url: string;
  status: number;
}

export interface PageResult {
  url: string;
  status: number;
  body: string;
  headers: Headers;
  hops: Hop[];
}

const ENTITIES: Record<string, string> = { '&amp;': '&', '&lt;': '<', '&gt;': '>', '&quot;': '"', '&#39;': "'", '&#96;': '`' };

function unescapeHtml(text: string): string {
  return text.replace(/&(amp|lt|gt|quot|#39|#96);/g, (e) => ENTITIES[e] as string);
}

export interface FormData {
  action: string;
  method: string;
  fields: Record<string, string>;
  buttons: Array<{ name: string; value: string }>;
}

/** The forms of a page: hidden/text inputs with their values, checked checkboxes, submit buttons. */
export function parseForms(htmlText: string): FormData[] {
  return [...htmlText.matchAll(/<form\b([^>]*)>([\s\S]*?)<\/form>/g)].map((match) => {
    const attrs = match[1] ?? '';
    const inner = match[2] ?? '';
    const attr = (source: string, name: string) => {
      const found = new RegExp(`\\b${name}="([^"]*)"`).exec(source);
      return found ? unescapeHtml(found[1] as string) : undefined;
    };
    const fields: Record<string, string> = {};
    for (const input of inner.matchAll(/<input\b([^>]*)>/g)) {
      const a = input[1] ?? '';
      const name = attr(a, 'name');
      if (!name) continue;
      const type = attr(a, 'type') ?? 'text';
      if (type === 'checkbox' && !/\bchecked\b/.test(a)) continue;
      fields[name] = attr(a, 'value') ?? '';
    }
    const buttons = [...inner.matchAll(/<button\b([^>]*)>/g)].map((b) => ({ name: attr(b[1] ?? '', 'name') ?? '', value: attr(b[1] ?? '', 'value') ?? '' }));
    return { action: attr(attrs, 'action') ?? '', method: (attr(attrs, 'method') ?? 'get').toLowerCase(), fields, buttons };
  });
}

export class TestBrowser {
  readonly cookies = new Map<string, string>();
  /** Stop following redirects at URLs starting with one of these (an OAuth2 client's redirect_uri). */
  stopAt: string[] = [];

  cookieHeader(): string {
    return [...this.cookies].map(([k, v]) => `${k}=${v}`).join('; ');
  }

  private store(headers: Headers): void {
    for (const line of headers.getSetCookie()) {
      const [pair] = line.split(';');
      const eq = (pair ?? '').indexOf('=');
      if (eq <= 0) continue;
      const name = (pair as string).slice(0, eq).trim();
      const value = (pair as string).slice(eq + 1).trim();
      if (/;\s*max-age=0/i.test(line) || value === '') this.cookies.delete(name);
      else this.cookies.set(name, value);
    }
  }

  async request(method: string, url: string, form?: Record<string, string>, extraHeaders: Record<string, string> = {}): Promise<Response> {
    const headers: Record<string, string> = { accept: 'text/html', ...extraHeaders };
    if (this.cookies.size > 0) headers.cookie = this.cookieHeader();
    if (form) headers['content-type'] = 'application/x-www-form-urlencoded';
    const response = await fetch(url, { method, headers, redirect: 'manual', ...(form ? { body: new URLSearchParams(form).toString() } : {}) });
    this.store(response.headers);
    return response;
  }

  /** Request and follow redirects (303 and 302 become GET) until a page, or a stopAt URL, is reached. */
  async go(url: string, method = 'GET', form?: Record<string, string>, maxHops = 25): Promise<PageResult> {
    const hops: Hop[] = [];
    let current = url;
    let response = await this.request(method, current, form);
    hops.push({ method, url: current, status: response.status });
    while ([301, 302, 303, 307, 308].includes(response.status)) {
      const location = response.headers.get('location');
      if (!location) break;
      current = new URL(location, current).toString();
      if (this.stopAt.some((prefix) => current.startsWith(prefix))) {
        return { url: current, status: response.status, body: '', headers: response.headers, hops };
      }
      if (hops.length >= maxHops) throw new Error(`redirect loop: ${hops.map((h) => h.url).join(' → ')}`);
      await response.body?.cancel();
      response = await this.request('GET', current);
      hops.push({ method: 'GET', url: current, status: response.status });
    }
    return { url: current, status: response.status, body: await response.text(), headers: response.headers, hops };
  }

  /** Fill the page's form (by its action), press a button, follow the redirects. */
  async submit(pageResult: PageResult, action: string, values: Record<string, string> = {}, button?: { name: string; value: string }): Promise<PageResult> {
    const form = parseForms(pageResult.body).find((f) => f.action === action);
    if (!form) throw new Error(`no form with action ${action} on ${pageResult.url}:\n${pageResult.body}`);
    const fields = { ...form.fields, ...values };
    if (button) fields[button.name] = button.value;
    return this.go(new URL(form.action, pageResult.url).toString(), form.method.toUpperCase(), fields);
  }
}
