import { apiHeaders, readClientConfig } from '../lib/map.js';
import { problemMessage, readProblem } from '../lib/problems.js';
import { clientTranslator } from './messages.js';
import { queueChanged } from './qc-count.js';

/** "Submit for review" on a feature page: POST /api/qc/submit with the comment, then show the new state. */
export function mountQcSubmit(): void {
  const form = document.getElementById('qc-submit') as HTMLFormElement | null;
  if (!form) return;
  const config = readClientConfig();
  const t = clientTranslator();
  const message = document.getElementById('qc-submit-message')!;
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    const comment = (form.elements.namedItem('comment') as HTMLTextAreaElement).value.trim();
    const button = form.querySelector('button')!;
    button.disabled = true;
    void fetch(`${config.apiUrl}/api/qc/submit`, {
      method: 'POST',
      credentials: 'include',
      headers: apiHeaders(config, { 'content-type': 'application/json', accept: 'application/json' }),
      body: JSON.stringify({ featureId: form.dataset.featureId, ...(comment ? { comment } : {}) }),
    }).then(async (response) => {
      if (response.ok) {
        message.textContent = t('qc.submit.done');
        queueChanged();
        form.querySelector('textarea')!.disabled = true;
        return;
      }
      message.textContent = t('qc.submit.failed', { message: problemMessage(t, await readProblem(response)) });
      button.disabled = false;
    });
  });
}
