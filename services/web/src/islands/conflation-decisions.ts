import type { Geometry } from '../../../shared/features/schema.js';
import type { MessageKey } from '../i18n/index.js';
import { choiceOf, exportedElement } from '../lib/decisions.js';
import { apiHeaders, createMap, readClientConfig } from '../lib/map.js';
import { PENDING, type FeatureReviews } from '../lib/qc.js';
import { clientTranslator } from './messages.js';

const JOB_POLL_MS = 1_000;
const JOB_POLL_LIMIT = 120;

interface DecisionPage {
  /** The job shown for deciding (absent when none waits). */
  job?: { id: number; featureId: string; featureGeometry: Geometry | null; candidates: Array<Geometry | null> };
  /** The OSM plan the job waits with: confirming chooses `proposed`; the map shows before and after. */
  plan?: { proposed: 'create' | { type: 'node' | 'way' | 'relation'; id: number }; before: Geometry | null; after: Geometry };
  /** The job decided just before this page was loaded: its export is followed until it finishes. */
  decided?: { jobId: number; featureId: string; name: string; choice: string; target: string };
}

/**
 * /qc/decisions: the feature and its candidates on the map (the chosen one highlighted as the radio
 * group changes), the decision POSTed to the API, then on to the next waiting job — the page reloads
 * with `?decided=`, and here the decided job's export is followed until it is done.
 */
export function mountConflationDecisions(): void {
  const element = document.getElementById('fp-decisions');
  if (!element) return;
  const page = JSON.parse(element.textContent ?? '{}') as DecisionPage;
  const config = readClientConfig();
  const t = clientTranslator();
  const api = (path: string, init: RequestInit = {}) =>
    fetch(`${config.apiUrl}${path}`, { credentials: 'include', ...init, headers: apiHeaders(config, { accept: 'application/json', ...(init.body ? { 'content-type': 'application/json' } : {}) }) });

  if (page.decided) void followExport(page.decided);
  const job = page.job;
  const form = document.getElementById('decision-form') as HTMLFormElement | null;
  if (!job || !form) return;

  const radios = [...form.querySelectorAll<HTMLInputElement>('input[name="choice"]')];
  const moveGeometry = document.getElementById('move-geometry') as HTMLInputElement | null;
  const comment = document.getElementById('decision-comment') as HTMLTextAreaElement | null;
  const error = document.getElementById('decision-error')!;
  const message = document.getElementById('decision-message')!;
  const button = form.querySelector<HTMLButtonElement>('button[type="submit"]')!;
  const mapTarget = document.getElementById('decision-map');
  // Wikibase candidates have no geometry: the map then shows the feature alone.
  const drawn = job.candidates.filter((geometry): geometry is Geometry => geometry !== null);
  const map = mapTarget ? createMap(mapTarget, { config }) : undefined;
  const chosenIndex = () => {
    const checked = radios.findIndex((radio) => radio.checked);
    return checked >= 0 && checked < job.candidates.length && job.candidates[checked] ? drawn.indexOf(job.candidates[checked]) : undefined;
  };
  // With a plan: the element after the upload as the feature, and as it is now as the one candidate.
  const plan = page.plan;
  const draw = () =>
    plan ? map?.showCandidates(plan.after, plan.before ? [plan.before] : [], plan.before ? 0 : undefined) : map?.showCandidates(job.featureGeometry ?? undefined, drawn, chosenIndex());
  draw();
  document.getElementById('confirm-plan')?.addEventListener('click', () => {
    if (plan) void decide(plan.proposed);
  });

  form.addEventListener('change', () => {
    draw();
    error.textContent = '';
    form.querySelector('fieldset')?.removeAttribute('aria-invalid');
    // Moving a geometry applies to a chosen element only.
    if (moveGeometry) {
      moveGeometry.disabled = form.querySelector<HTMLInputElement>('input[name="choice"]:checked')?.value === 'create';
      if (moveGeometry.disabled) moveGeometry.checked = false;
    }
  });

  form.addEventListener('submit', (event) => {
    event.preventDefault();
    void decide();
  });

  async function decide(confirmed?: NonNullable<DecisionPage['plan']>['proposed']): Promise<void> {
    const checked = radios.find((radio) => radio.checked);
    const choice = confirmed ?? (checked ? choiceOf(checked.value) : undefined);
    if (!choice) {
      error.textContent = t('decisions.chooseRequired');
      radios[0]?.focus();
      return;
    }
    button.disabled = true;
    message.textContent = '';
    const body = { choice, moveGeometry: confirmed ? false : (moveGeometry?.checked ?? false), ...(comment?.value.trim() ? { comment: comment.value.trim() } : {}) };
    const response = await api(`/api/qc/jobs/${job!.id}/decision`, { method: 'POST', body: JSON.stringify(body) });
    if (!response.ok) {
      message.textContent = t('decisions.failed', { message: await problemText(response) });
      button.disabled = false;
      return;
    }
    // Recorded and queued again: on to the next waiting job, which shows how this one's export ends.
    const next = new URL(location.href);
    next.search = '';
    next.searchParams.set('decided', String(job!.id));
    next.searchParams.set('feature', job!.featureId);
    location.assign(next.toString());
  }

  async function followExport(decided: NonNullable<DecisionPage['decided']>): Promise<void> {
    const line = document.getElementById('decided-result');
    if (!line) return;
    for (let round = 0; round < JOB_POLL_LIMIT; round++) {
      const response = await api(`/api/features/${encodeURIComponent(decided.featureId)}/reviews`);
      if (!response.ok) return;
      const reviews = (await response.json()) as FeatureReviews;
      const found = reviews.jobs.find((candidate) => candidate.id === decided.jobId);
      if (!found) return;
      const status = t(`qc.jobStatus.${found.status}` as MessageKey);
      const result = exportedElement(found.result);
      const values = { name: decided.name, choice: decided.choice, target: decided.target, status };
      const text = result ? t('decisions.savedResult', { ...values, result }) : t('decisions.saved', values);
      if (line.textContent !== text) line.textContent = text;
      if (!PENDING.has(found.status)) return;
      await new Promise((resolve) => setTimeout(resolve, JOB_POLL_MS));
    }
  }
}

async function problemText(response: Response): Promise<string> {
  try {
    const problem = (await response.json()) as { detail?: string; title?: string };
    return problem.detail ?? problem.title ?? String(response.status);
  } catch {
    return String(response.status);
  }
}
