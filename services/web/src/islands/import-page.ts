import type { Geometry } from '../../../shared/features/schema.js';
import { apiHeaders, createMap, readClientConfig, type MapHandle } from '../lib/map.js';
import type { Feature } from '../lib/types.js';
import { clientTranslator } from './messages.js';

/**
 * The import page (pages/import.astro): Check sends the file to POST /api/imports/check with the
 * mapping chosen (none at first: the API guesses it from the attribute names and says which it used),
 * shows every row's result in the table and the rows on the map (valid ones styled by kategorie,
 * invalid ones outlined orange), and offers "Import N features", which sends the same file and
 * mapping to POST /api/imports with a progress bar for the upload. Changing the mapping checks again.
 */
const TARGETS = ['name', 'kategorie', 'adresse', 'telefon'] as const;
/** At most this many rows are listed in the table (rows with problems first); the counts cover all. */
const LISTED_ROWS = 500;

interface RowResult {
  row: number;
  feature: { type: 'Feature'; geometry: Geometry | null; properties: Record<string, unknown> };
  errors: Array<{ field: string; message: string }>;
}
interface CheckResult {
  fields: string[];
  mapping: Partial<Record<(typeof TARGETS)[number], string>>;
  total: number;
  valid: number;
  invalid: number;
  rows: RowResult[];
}

export function mountImportPage(): void {
  const form = document.getElementById('import-form') as HTMLFormElement | null;
  if (!form) return;
  const config = readClientConfig();
  const t = clientTranslator();
  const input = document.getElementById('import-file') as HTMLInputElement;
  const fileError = document.getElementById('import-file-error')!;
  const mapping = document.getElementById('import-mapping') as HTMLFieldSetElement;
  const selects = TARGETS.map((target) => document.getElementById(`import-map-${target}`) as HTMLSelectElement);
  const status = document.getElementById('import-status')!;
  const progress = document.getElementById('import-progress') as HTMLProgressElement;
  const commit = document.getElementById('import-commit') as HTMLButtonElement;
  const mapElement = document.getElementById('import-map')!;
  const rowsSection = document.getElementById('import-rows')!;
  const rowsNote = document.getElementById('import-rows-note')!;
  const tbody = rowsSection.querySelector('tbody')!;
  const checkButton = document.getElementById('import-check') as HTMLButtonElement;
  let map: MapHandle | undefined;
  let checked: { file: File; query: string; result: CheckResult } | undefined;

  const problemText = async (response: Response) => {
    const problem = (await response.json().catch(() => ({}))) as { detail?: string; title?: string };
    return problem.detail ?? problem.title ?? String(response.status);
  };
  const queryFor = (file: File, withMapping: boolean) => {
    const params = new URLSearchParams({ filename: file.name });
    if (withMapping) for (const select of selects) params.set(select.dataset.target!, select.value);
    return params.toString();
  };

  async function check(withMapping: boolean): Promise<void> {
    const file = input.files?.[0];
    fileError.textContent = '';
    input.removeAttribute('aria-invalid');
    if (!file) {
      fileError.textContent = t('import.noFile');
      input.setAttribute('aria-invalid', 'true');
      input.focus();
      return;
    }
    checked = undefined;
    commit.hidden = true;
    checkButton.disabled = true;
    status.textContent = t('import.checking');
    const query = queryFor(file, withMapping);
    try {
      const response = await fetch(`${config.apiUrl}/api/imports/check?${query}`, { method: 'POST', credentials: 'include', headers: apiHeaders(config, { 'content-type': 'application/octet-stream', accept: 'application/json' }), body: file });
      if (!response.ok) {
        status.textContent = t('import.failed', { message: await problemText(response) });
        return;
      }
      const result = (await response.json()) as CheckResult;
      show(result);
      // The mapping the check used (the API's guess at first), as the selects now show it.
      checked = { file, query: queryFor(file, true), result };
    } catch (error) {
      status.textContent = t('import.failed', { message: (error as Error).message });
    } finally {
      checkButton.disabled = false;
    }
  }

  function show(result: CheckResult): void {
    for (const select of selects) {
      const target = select.dataset.target as (typeof TARGETS)[number];
      select.replaceChildren(new Option(t('import.unmapped'), ''), ...result.fields.map((field) => new Option(field, field)));
      select.value = result.mapping[target] ?? '';
    }
    mapping.hidden = false;
    status.textContent = t('import.checked', { total: result.total, valid: result.valid, invalid: result.invalid });
    commit.textContent = t('import.commit', { count: result.valid });
    commit.hidden = result.valid === 0;
    const ordered = [...result.rows.filter((r) => r.errors.length > 0), ...result.rows.filter((r) => r.errors.length === 0)].slice(0, LISTED_ROWS);
    tbody.replaceChildren(
      ...ordered.map((r) => {
        const tr = document.createElement('tr');
        const cells = [String(r.row), String(r.feature.properties.name ?? '—'), String(r.feature.properties.kategorie ?? '—')];
        for (const [i, text] of cells.entries()) {
          const cell = document.createElement(i === 0 ? 'th' : 'td');
          if (i === 0) cell.setAttribute('scope', 'row');
          cell.textContent = text;
          tr.append(cell);
        }
        const verdict = document.createElement('td');
        verdict.textContent = r.errors.length === 0 ? t('import.ok') : r.errors.map((e) => `${e.field}: ${e.message}`).join('; ');
        if (r.errors.length > 0) verdict.className = 'bad';
        tr.append(verdict);
        return tr;
      }),
    );
    rowsNote.textContent = result.rows.length > LISTED_ROWS ? t('import.shownRows', { shown: LISTED_ROWS, total: result.rows.length }) : '';
    rowsSection.hidden = false;
    mapElement.hidden = false;
    map ??= createMap(mapElement, { config });
    const invalid = result.rows.filter((r) => r.errors.length > 0 && r.feature.geometry).map((r) => r.feature.geometry!);
    map.showCandidates(undefined, invalid);
    const valid = result.rows.filter((r) => r.errors.length === 0);
    map.upsert(valid.map((r) => ({ type: 'Feature', id: `import-row-${r.row}`, geometry: r.feature.geometry!, properties: { ...r.feature.properties, version: 1 } }) as Feature));
    map.fit(result.rows.flatMap((r) => (r.feature.geometry ? [r.feature.geometry] : [])));
  }

  function importChecked(): void {
    if (!checked) return;
    const { file, query } = checked;
    commit.disabled = true;
    checkButton.disabled = true;
    progress.hidden = false;
    progress.value = 0;
    status.textContent = t('import.importing');
    // XMLHttpRequest: fetch reports no upload progress.
    const request = new XMLHttpRequest();
    request.open('POST', `${config.apiUrl}/api/imports?${query}`);
    request.withCredentials = true;
    for (const [name, value] of Object.entries(apiHeaders(config, { 'content-type': 'application/octet-stream', accept: 'application/json' }))) request.setRequestHeader(name, value);
    request.upload.onprogress = (event) => {
      if (event.lengthComputable) progress.value = Math.round((event.loaded / event.total) * 90);
    };
    // Sent: the API now validates and writes; the bar waits at 90 % for its answer.
    request.upload.onload = () => progress.removeAttribute('value');
    const finish = (message: string) => {
      progress.value = 100;
      progress.hidden = true;
      status.textContent = message;
      commit.disabled = false;
      checkButton.disabled = false;
    };
    request.onload = () => {
      let body: { imported?: number; invalid?: number; detail?: string; title?: string } = {};
      try {
        body = JSON.parse(request.responseText) as typeof body;
      } catch {
        // not JSON: the status says enough
      }
      if (request.status === 201) {
        commit.hidden = true;
        checked = undefined;
        finish(t('import.done', { imported: body.imported ?? 0, invalid: body.invalid ?? 0 }));
      } else finish(t('import.failed', { message: body.detail ?? body.title ?? String(request.status) }));
    };
    request.onerror = () => finish(t('import.failed', { message: t('import.network') }));
    request.send(file);
  }

  form.addEventListener('submit', (event) => {
    event.preventDefault();
    void check(false);
  });
  for (const select of selects) select.addEventListener('change', () => void check(true));
  input.addEventListener('change', () => {
    mapping.hidden = true;
    commit.hidden = true;
  });
  commit.addEventListener('click', importChecked);

  const demo = document.getElementById('import-demo') as HTMLButtonElement | null;
  demo?.addEventListener('click', () => {
    demo.disabled = true;
    status.textContent = t('import.importing');
    void fetch(`${config.apiUrl}/api/imports/demo`, { method: 'POST', credentials: 'include', headers: apiHeaders(config, { accept: 'application/json' }) })
      .then(async (response) => {
        status.textContent = response.ok ? t('import.demoDone', { imported: ((await response.json()) as { imported: number }).imported }) : t('import.failed', { message: await problemText(response) });
      })
      .catch((error: unknown) => (status.textContent = t('import.failed', { message: (error as Error).message })))
      .finally(() => (demo.disabled = false));
  });
}
