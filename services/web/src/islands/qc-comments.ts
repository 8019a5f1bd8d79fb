import { apiHeaders, readClientConfig } from '../lib/map.js';
import type { ClientConfig } from '../lib/types.js';
import type { Translate } from '../i18n/index.js';
import { clientTranslator } from './messages.js';

/**
 * Comment threads of QC items: the section on /qc/{id} (rendered with its comments) and the collapsed
 * ones on /qc/mine (`details[data-thread]`, loaded when first opened). Adding posts to
 * POST /api/qc/items/{id}/comments and appends the stored comment.
 */
interface Comment {
  author: string;
  authorName: string | null;
  body: string;
  createdAt: string;
}

export function mountQcComments(): void {
  const config = readClientConfig();
  const t = clientTranslator();
  for (const thread of document.querySelectorAll<HTMLElement>('[data-thread]')) mountThread(thread, config, t);
}

function commentItem(comment: Comment): HTMLLIElement {
  const item = document.createElement('li');
  const head = document.createElement('p');
  const who = document.createElement('strong');
  who.textContent = comment.authorName ?? comment.author;
  const time = document.createElement('time');
  time.dateTime = comment.createdAt;
  time.textContent = new Date(comment.createdAt).toLocaleString(document.documentElement.lang);
  head.append(who, ' · ', time);
  const text = document.createElement('p');
  text.textContent = comment.body;
  item.append(head, text);
  return item;
}

function mountThread(thread: HTMLElement, config: ClientConfig, t: Translate): void {
  const featureId = thread.dataset.featureId ?? '';
  const url = `${config.apiUrl}/api/qc/items/${encodeURIComponent(featureId)}/comments`;
  const list = thread.querySelector('ol')!;
  const empty = thread.querySelector<HTMLElement>('[data-empty]');
  const form = thread.querySelector('form')!;
  const textarea = form.querySelector('textarea')!;
  const error = form.querySelector<HTMLElement>('.error')!;
  // A collapsed thread (/qc/mine) loads its comments when first opened.
  if (thread instanceof HTMLDetailsElement) {
    let loaded = false;
    thread.addEventListener('toggle', () => {
      if (!thread.open || loaded) return;
      loaded = true;
      void fetch(url, { credentials: 'include', headers: apiHeaders(config, { accept: 'application/json' }) })
        .then(async (response) => {
          if (!response.ok) throw new Error(String(response.status));
          const { items } = (await response.json()) as { items: Comment[] };
          list.replaceChildren(...items.map(commentItem));
          if (empty) empty.hidden = items.length > 0;
        })
        .catch((failure: unknown) => {
          loaded = false;
          error.textContent = t('qc.comments.failed', { message: (failure as Error).message });
        });
    });
  }
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    error.textContent = '';
    textarea.removeAttribute('aria-invalid');
    const body = textarea.value.trim();
    if (!body) {
      error.textContent = t('qc.comments.empty');
      textarea.setAttribute('aria-invalid', 'true');
      textarea.focus();
      return;
    }
    const button = form.querySelector('button')!;
    button.disabled = true;
    void fetch(url, {
      method: 'POST',
      credentials: 'include',
      headers: apiHeaders(config, { 'content-type': 'application/json', accept: 'application/json' }),
      body: JSON.stringify({ body }),
    })
      .then(async (response) => {
        if (!response.ok) {
          const problem = (await response.json().catch(() => ({}))) as { detail?: string };
          error.textContent = t('qc.comments.failed', { message: problem.detail ?? String(response.status) });
          return;
        }
        list.append(commentItem((await response.json()) as Comment));
        if (empty) empty.hidden = true;
        textarea.value = '';
      })
      .catch((failure: unknown) => (error.textContent = t('qc.comments.failed', { message: (failure as Error).message })))
      .finally(() => (button.disabled = false));
  });
}
