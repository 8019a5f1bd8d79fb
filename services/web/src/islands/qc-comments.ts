import { apiHeaders, readClientConfig } from '../lib/map.js';
import { clientTranslator } from './messages.js';

/** The comment thread on a QC item page (/qc/{id}): POST /api/qc/items/{id}/comments, then the comment appended. */
export function mountQcComments(): void {
  const section = document.getElementById('qc-comments');
  const form = document.getElementById('qc-comment-form') as HTMLFormElement | null;
  if (!section || !form) return;
  const config = readClientConfig();
  const t = clientTranslator();
  const textarea = document.getElementById('qc-comment') as HTMLTextAreaElement;
  const error = document.getElementById('qc-comment-error')!;
  const list = document.getElementById('qc-comment-list')!;
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
    void fetch(`${config.apiUrl}/api/qc/items/${encodeURIComponent(section.dataset.featureId ?? '')}/comments`, {
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
        const comment = (await response.json()) as { author: string; authorName: string | null; body: string; createdAt: string };
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
        list.append(item);
        document.getElementById('qc-comments-empty')?.remove();
        textarea.value = '';
      })
      .catch((failure: unknown) => (error.textContent = t('qc.comments.failed', { message: (failure as Error).message })))
      .finally(() => (button.disabled = false));
  });
}
