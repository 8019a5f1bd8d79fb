import type { MessageKey } from '../i18n/index.js';
import { apiHeaders, readClientConfig } from '../lib/map.js';
import { jobOutcome, PENDING, RERUNNABLE, type FeatureReviews, type QcClaim, type QueueItem } from '../lib/qc.js';
import { problemMessage, readProblem } from '../lib/problems.js';
import { clockAndRelative } from '../lib/times.js';
import { mountFeatureMaps } from './feature-maps.js';
import { clientTranslator } from './messages.js';
import { queueChanged } from './qc-count.js';

/** Renewed well before the API's 10-minute claim runs out, so a reviewer who reads slowly keeps it. */
const RENEW_EVERY_MS = 3 * 60_000;
const JOB_POLL_MS = 1_000;
const JOB_POLL_LIMIT = 120;

/** The desk mounted now; a new item shown in place (see `next`) ends it first. */
let mounted: AbortController | undefined;

/**
 * The review view's island: claims the item while the page is open (renewed; released on leave and
 * ended by the decision on the server), approve / reject with a reason, next item, the keyboard
 * shortcuts a/r/n/? (off while typing), and the export jobs after a decision (admins re-run them).
 */
export function mountQcDesk(): void {
  const element = document.getElementById('fp-qc-desk');
  if (!element) return;
  mounted?.abort();
  const lifetime = new AbortController();
  mounted = lifetime;
  const { signal } = lifetime;
  const desk = JSON.parse(element.textContent ?? '{}') as { featureId: string; decidable: boolean; status: string | null; admin: boolean };
  const config = readClientConfig();
  const t = clientTranslator();
  const api = (path: string, init: RequestInit = {}) =>
    fetch(`${config.apiUrl}${path}`, { credentials: 'include', ...init, headers: apiHeaders(config, { accept: 'application/json', ...(init.body ? { 'content-type': 'application/json' } : {}) }) });
  const path = encodeURIComponent(desk.featureId);
  const message = document.getElementById('qc-message')!;
  const claimLine = document.getElementById('qc-claim')!;
  const controls = document.getElementById('decision-controls');
  const approveButton = document.getElementById('approve') as HTMLButtonElement | null;
  const rejectButton = document.getElementById('reject') as HTMLButtonElement | null;
  const reason = document.getElementById('reason') as HTMLTextAreaElement | null;
  const reasonError = document.getElementById('reason-error');
  const commonReason = document.getElementById('common-reason') as HTMLSelectElement | null;
  const dialog = document.getElementById('shortcuts') as HTMLDialogElement | null;
  const time = (iso: string) => clockAndRelative(iso, config.lang);
  let holding = false;
  /** The end the last claim or renewal answered: a release names it, so it never ends a claim this reviewer renewed since on another page. */
  let heldUntil = '';
  let decided = false;
  let renewTimer: ReturnType<typeof setInterval> | undefined;

  // The API's refusals in the reader's language; a claim's end as a local clock time.
  const problemText = async (response: Response) => problemMessage(t, await readProblem(response), time);

  async function claim(): Promise<void> {
    const response = await api(`/api/qc/claim/${path}`, { method: 'POST' });
    if (response.ok) {
      const held = (await response.json()) as QcClaim;
      holding = true;
      heldUntil = held.expiresAt;
      claimLine.textContent = t('qc.claim.mine', { until: time(held.expiresAt) });
      return;
    }
    holding = false;
    // Someone else holds it (or it was decided meanwhile): no decision controls, and say why.
    const text = await problemText(response);
    controls?.setAttribute('hidden', '');
    claimLine.textContent = t('qc.claim.lost', { message: text });
    if (renewTimer) clearInterval(renewTimer);
  }

  function release(): void {
    if (!holding || decided) return;
    holding = false;
    // keepalive: the request survives the page being unloaded.
    void api(`/api/qc/claim/${path}?expiresAt=${encodeURIComponent(heldUntil)}`, { method: 'DELETE', keepalive: true }).catch(() => undefined);
  }

  function renderJobs(reviews: FeatureReviews): void {
    const target = document.getElementById('qc-jobs')!;
    const jobs = reviews.jobs.filter((job) => job.task !== 'reviewer_notice');
    if (jobs.length === 0) {
      target.replaceChildren(Object.assign(document.createElement('p'), { textContent: t('qc.jobs.none') }));
      return;
    }
    const table = document.createElement('table');
    const caption = table.createCaption();
    caption.className = 'visually-hidden';
    caption.textContent = t('qc.jobs.caption');
    const head = table.createTHead().insertRow();
    for (const key of ['qc.jobs.task', 'qc.jobs.status', 'qc.jobs.result'] as const) {
      const th = document.createElement('th');
      th.scope = 'col';
      th.textContent = t(key);
      head.append(th);
    }
    const body = table.createTBody();
    for (const job of jobs) {
      const row = body.insertRow();
      const th = document.createElement('th');
      th.scope = 'row';
      th.textContent = t(`qc.job.${job.task}` as MessageKey);
      row.append(th);
      row.insertCell().textContent = t(`qc.jobStatus.${job.status}` as MessageKey);
      const result = row.insertCell();
      result.textContent = jobOutcome(job);
      if (desk.admin && RERUNNABLE.has(job.status)) {
        const button = document.createElement('button');
        button.type = 'button';
        button.className = 'secondary';
        button.dataset.rerun = String(job.id);
        button.textContent = t('qc.jobs.rerun');
        button.setAttribute('aria-label', t('qc.jobs.rerunOf', { task: t(`qc.job.${job.task}` as MessageKey) }));
        result.append(' ', button);
      }
    }
    target.replaceChildren(table);
  }

  /** After a decision: the jobs' progress until none is pending (the worker runs them). */
  async function followJobs(): Promise<void> {
    for (let round = 0; round < JOB_POLL_LIMIT; round++) {
      const response = await api(`/api/features/${path}/reviews`);
      // Another item shown in place meanwhile: its page has its own jobs.
      if (!response.ok || signal.aborted) return;
      const reviews = (await response.json()) as FeatureReviews;
      renderJobs(reviews);
      if (!reviews.jobs.some((job) => PENDING.has(job.status))) return;
      await new Promise((resolve) => setTimeout(resolve, JOB_POLL_MS));
    }
  }

  function setButtonsDisabled(disabled: boolean): void {
    for (const button of [approveButton, rejectButton]) if (button) button.disabled = disabled;
  }

  async function decide(action: 'approve' | 'reject'): Promise<void> {
    if (decided || !controls || controls.hidden) return;
    let body: string | undefined;
    if (action === 'reject') {
      const text = reason?.value.trim() ?? '';
      if (!text) {
        reason?.setAttribute('aria-invalid', 'true');
        if (reasonError) reasonError.textContent = t('qc.reasonRequired');
        reason?.focus();
        return;
      }
      body = JSON.stringify({ reason: text });
    }
    setButtonsDisabled(true);
    const response = await api(`/api/qc/${action}/${path}`, { method: 'POST', ...(body ? { body } : {}) });
    if (!response.ok) {
      message.textContent = t('qc.decisionFailed', { message: await problemText(response) });
      setButtonsDisabled(false);
      return;
    }
    // The decision ended the claim on the server.
    decided = true;
    holding = false;
    if (renewTimer) clearInterval(renewTimer);
    controls.setAttribute('hidden', '');
    claimLine.textContent = '';
    const status = action === 'approve' ? 'approved' : 'rejected';
    document.getElementById('qc-status')!.textContent = t(`status.${status}`);
    message.textContent = t(action === 'approve' ? 'qc.decided.approved' : 'qc.decided.rejected');
    document.getElementById('next')?.focus();
    queueChanged();
    await followJobs();
  }

  /** The first item of the queue someone else does not hold, not this one and not the reviewer's own. */
  async function nextCandidate(): Promise<string | undefined> {
    const response = await api('/api/qc/queue?limit=50');
    const items = response.ok ? ((await response.json()) as { items: QueueItem[] }).items : [];
    const me = config.user?.id;
    return items.find((item) => item.featureId !== desk.featureId && (!item.claim || item.claim.holder === me || Date.parse(item.claim.expiresAt) <= Date.now()) && item.submitter !== me)?.featureId;
  }

  /**
   * The next item's review view, fetched while the reviewer looks at this one: the page as the server
   * renders it (item, checks, history, jobs). Only its claim is left for the moment "next" is pressed.
   * An item in review cannot be edited, so the view stays right; whether it is still free and still in
   * review is what the claim then says (and the view says so when it is not).
   */
  let prefetched: Promise<{ featureId: string; html: string } | undefined> | undefined;
  function prefetchNext(): void {
    prefetched ??= nextCandidate()
      .then(async (featureId) => {
        if (!featureId) return undefined;
        const response = await fetch(`/qc/${encodeURIComponent(featureId)}`, { credentials: 'include', signal });
        return response.ok ? { featureId, html: await response.text() } : undefined;
      })
      .catch(() => undefined);
  }

  async function next(): Promise<void> {
    const ready = await prefetched;
    prefetched = undefined;
    release();
    if (ready && !signal.aborted) {
      showInPlace(ready.featureId, ready.html);
      return;
    }
    const candidate = await nextCandidate();
    if (!candidate) {
      message.textContent = t('qc.noNext');
      return;
    }
    location.assign(`/qc/${encodeURIComponent(candidate)}`);
  }

  /** Shows a prefetched review view without a navigation: its main content, title and address; then its desk claims it. */
  function showInPlace(featureId: string, html: string): void {
    const incoming = new DOMParser().parseFromString(html, 'text/html');
    const main = document.getElementById('main');
    const content = incoming.getElementById('main');
    if (!main || !content) {
      location.assign(`/qc/${encodeURIComponent(featureId)}`);
      return;
    }
    if (renewTimer) clearInterval(renewTimer);
    main.replaceChildren(...Array.from(content.childNodes, (node) => document.importNode(node, true)));
    document.title = incoming.title;
    history.pushState({ qcDesk: featureId }, '', `/qc/${encodeURIComponent(featureId)}`);
    mountQcDesk();
    mountFeatureMaps();
    document.querySelector<HTMLElement>('main h1')?.setAttribute('tabindex', '-1');
    document.querySelector<HTMLElement>('main h1')?.focus();
  }

  approveButton?.addEventListener('click', () => void decide('approve'), { signal });
  rejectButton?.addEventListener('click', () => void decide('reject'), { signal });
  document.getElementById('next')?.addEventListener('click', () => void next(), { signal });
  document.getElementById('shortcuts-open')?.addEventListener('click', () => dialog?.showModal(), { signal });
  // A common reason fills the reason field, where it can be edited before sending.
  commonReason?.addEventListener('change', () => {
    if (!reason || !commonReason.value) return;
    reason.value = commonReason.value;
    reason.removeAttribute('aria-invalid');
    if (reasonError) reasonError.textContent = '';
  }, { signal });
  document.getElementById('qc-jobs')?.addEventListener('click', (event) => {
    const button = (event.target as HTMLElement).closest<HTMLButtonElement>('button[data-rerun]');
    if (!button) return;
    button.disabled = true;
    void api(`/api/qc/jobs/${encodeURIComponent(button.dataset.rerun ?? '')}/rerun`, { method: 'POST' }).then(async (response) => {
      if (!response.ok) message.textContent = await problemText(response);
      await followJobs();
    });
  }, { signal });

  document.addEventListener('keydown', (event) => {
    if (event.ctrlKey || event.metaKey || event.altKey || event.defaultPrevented) return;
    const target = event.target as HTMLElement | null;
    // Off while typing: a letter in the reason field is text, not a command.
    if (target && (target.isContentEditable || ['INPUT', 'TEXTAREA', 'SELECT'].includes(target.tagName))) return;
    if (dialog?.open) return;
    if (event.key === 'a' && approveButton && !controls?.hidden) {
      event.preventDefault();
      void decide('approve');
    } else if (event.key === 'r' && commonReason && !controls?.hidden) {
      event.preventDefault();
      commonReason.focus();
    } else if (event.key === 'n') {
      event.preventDefault();
      void next();
    } else if (event.key === '?') {
      event.preventDefault();
      dialog?.showModal();
    }
  }, { signal });

  if (desk.decidable) {
    // The next item is fetched once this one is claimed, off the reviewer's way.
    void claim().then(() => {
      if (!signal.aborted) prefetchNext();
    });
    renewTimer = setInterval(() => void (holding ? claim() : undefined), RENEW_EVERY_MS);
    addEventListener('pagehide', release, { signal });
  } else prefetchNext();
  // Back and forward after an item was shown in place: the address changed, the content did not.
  addEventListener('popstate', () => location.reload(), { signal });
}
