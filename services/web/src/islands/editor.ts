import { FeaturePropertiesSchema, GeometrySchema, ADRESSE_MAX, NAME_MAX } from '../../../shared/features/schema.js';
import type { Geometry } from '../../../shared/features/schema.js';
import type { MessageKey, Translate } from '../i18n/index.js';
import { shapeSummary } from '../lib/geometry.js';
import { apiHeaders, createEditor, createMap, readClientConfig, type EditorHandle, type EditTool, type GeometryType } from '../lib/map.js';
import { recordSave, StorageFailure } from '../lib/offline/outbox.js';
import { fieldMessage, problemMessage, readProblem } from '../lib/problems.js';
import { sideChoice } from '../lib/side-choice.js';
import { EDITABLE_FIELDS, type EditableField, type Feature } from '../lib/types.js';
import { clientTranslator } from './messages.js';

type FieldId = EditableField | 'longitude' | 'latitude' | 'geometry';
type Properties = { name: string; kategorie: string; adresse: string | null; telefon: string | null };

/**
 * The editor island. Validation uses the API's own zod schema (services/shared/features/schema.ts), so
 * the browser refuses exactly what the server would; the server's problem+json field errors land at
 * the same fields. Saving sends If-Match; a 412 opens the conflict view (mine against theirs per field),
 * which keeps everything typed until the choice is saved.
 */
export function mountEditor(): void {
  const config = readClientConfig();
  const t = clientTranslator();
  const initial = JSON.parse(document.getElementById('fp-editor-initial')!.textContent ?? '{}') as { feature: Feature | null; etag: string | null };
  let etag = initial.etag;
  const featureId = initial.feature?.id;
  const form = document.getElementById('feature-form') as HTMLFormElement;
  const input = (id: string) => document.getElementById(id) as HTMLInputElement | HTMLSelectElement;
  const typeSelect = input('geometry-type') as HTMLSelectElement;
  const summary = document.getElementById('geometry-summary')!;
  const touched = new Set<FieldId>();
  let submitted = false;
  let typingCoordinates = false;

  const map = createMap(document.getElementById('map')!, { config, zoom: 15 });
  (window as unknown as { fpEditorMap: unknown }).fpEditorMap = map;
  const editor = createEditor(map, {
    type: typeSelect.value as GeometryType,
    // Undo or redo across a change of type brings the other type back: the form follows.
    onTypeChange: (type) => {
      typeSelect.value = type;
      showTools();
    },
    ...(initial.feature ? { initial: initial.feature.geometry } : {}),
    onChange: (geometry) => {
      describeGeometry(geometry);
      // Not while the point comes from the coordinate fields: rewriting "52." as "52" would fight the typist.
      if (geometry?.type === 'Point' && !typingCoordinates) {
        input('longitude').value = String(geometry.coordinates[0]);
        input('latitude').value = String(geometry.coordinates[1]);
      }
      touched.add('geometry');
      validate();
    },
  });
  (window as unknown as { fpEditor: unknown }).fpEditor = editor; // for tests reading the drawn geometry
  // Snap targets and context: the other features around.
  map.loadFromApi({});

  const describeGeometry = (geometry: Geometry | undefined) => {
    if (!geometry) {
      summary.textContent = t('editor.noGeometry');
      return;
    }
    const { parts, holes } = shapeSummary(geometry);
    summary.textContent = t('editor.geometrySummary', { type: t(`geometry.${geometry.type}`), parts, holes });
  };
  describeGeometry(initial.feature?.geometry);

  const pointFields = document.getElementById('point-fields')!;
  const toolButtons = [...document.querySelectorAll<HTMLButtonElement>('button[data-tool]')];
  const showTools = () => {
    const type = typeSelect.value as GeometryType;
    pointFields.hidden = type !== 'Point';
    for (const button of toolButtons) {
      const tool = button.dataset.tool as EditTool;
      button.hidden = (tool === 'hole' && !(type === 'Polygon' || type === 'MultiPolygon')) || (tool === 'part' && type !== 'MultiPolygon');
    }
  };
  const pressTool = (tool: EditTool) => {
    for (const button of toolButtons) button.setAttribute('aria-pressed', String(button.dataset.tool === tool));
    editor.setTool(tool);
  };
  for (const button of toolButtons) button.addEventListener('click', () => pressTool(button.dataset.tool as EditTool));
  typeSelect.addEventListener('change', () => {
    editor.setType(typeSelect.value as GeometryType);
    pressTool('draw');
    showTools();
  });
  showTools();
  for (const button of toolButtons) button.setAttribute('aria-pressed', String(button.dataset.tool === (initial.feature ? 'modify' : 'draw')));
  document.getElementById('clear-geometry')!.addEventListener('click', () => editor.clear());
  mountEditorKeys(editor, t, pressTool, (tool) => !toolButtons.find((button) => button.dataset.tool === tool)?.hidden);

  // Keyboard coordinates: a point appears as soon as both numbers are valid.
  const coordinate = (id: 'longitude' | 'latitude') => {
    const raw = input(id).value.trim().replace(',', '.');
    return raw === '' ? undefined : Number(raw);
  };
  const coordinateError = (id: 'longitude' | 'latitude'): string | undefined => {
    const value = coordinate(id);
    const limit = id === 'longitude' ? 180 : 90;
    if (value === undefined) return typeSelect.value === 'Point' && (submitted || touched.has(id)) ? t(`error.${id}`) : undefined;
    return Number.isFinite(value) && Math.abs(value) <= limit ? undefined : t(`error.${id}`);
  };
  for (const id of ['longitude', 'latitude'] as const) {
    input(id).addEventListener('input', () => {
      touched.add(id);
      const lon = coordinate('longitude');
      const lat = coordinate('latitude');
      if (!coordinateError('longitude') && !coordinateError('latitude') && lon !== undefined && lat !== undefined) {
        typingCoordinates = true;
        editor.setPoint(lon, lat);
        typingCoordinates = false;
      }
      validate();
    });
  }
  document.getElementById('locate')!.addEventListener('click', () => {
    navigator.geolocation.getCurrentPosition(
      (position) => editor.setPoint(Number(position.coords.longitude.toFixed(7)), Number(position.coords.latitude.toFixed(7))),
      () => setError('geometry', t('editor.locationFailed')),
      { enableHighAccuracy: true, timeout: 10_000 },
    );
  });

  const properties = (): Properties => {
    const optional = (id: string) => input(id).value.trim() || null;
    return { name: input('name').value, kategorie: input('kategorie').value, adresse: optional('adresse'), telefon: optional('telefon') };
  };
  const setProperties = (values: Properties) => {
    input('name').value = values.name;
    input('kategorie').value = values.kategorie;
    input('adresse').value = values.adresse ?? '';
    input('telefon').value = values.telefon ?? '';
  };

  const setError = (field: FieldId, message: string | undefined) => {
    const slot = document.getElementById(`${field}-error`);
    if (slot) slot.textContent = message ?? '';
    const control = field === 'geometry' ? document.getElementById('map') : document.getElementById(field);
    if (!control) return;
    if (message) control.setAttribute('aria-invalid', 'true');
    else control.removeAttribute('aria-invalid');
  };

  /** The schema's verdict per field, worded from the catalogue. */
  const localErrors = (): Map<FieldId, string> => {
    const errors = new Map<FieldId, string>();
    const result = FeaturePropertiesSchema.safeParse(properties());
    if (!result.success) {
      for (const issue of result.error.issues) {
        const field = issue.path[0] as FieldId;
        if (!errors.has(field)) errors.set(field, messageFor(t, field, issue.message));
      }
    }
    const geometry = editor.geometry();
    if (!geometry) errors.set('geometry', t('editor.geometryMissing'));
    else {
      const checked = GeometrySchema.safeParse(geometry);
      if (!checked.success) errors.set('geometry', t('error.invalid', { message: checked.error.issues[0]?.message ?? '' }));
    }
    for (const id of ['longitude', 'latitude'] as const) {
      const message = typeSelect.value === 'Point' ? coordinateError(id) : undefined;
      if (message) errors.set(id, message);
    }
    return errors;
  };

  const validate = (): Map<FieldId, string> => {
    const errors = localErrors();
    for (const field of [...EDITABLE_FIELDS, 'longitude', 'latitude', 'geometry'] as FieldId[]) {
      setError(field, submitted || touched.has(field) ? errors.get(field) : undefined);
    }
    return errors;
  };
  for (const field of EDITABLE_FIELDS) {
    const element = input(field);
    element.addEventListener('input', () => {
      touched.add(field);
      validate();
    });
    element.addEventListener('blur', () => {
      touched.add(field);
      validate();
    });
  }

  const status = document.getElementById('save-status')!;
  const errorSummary = document.getElementById('editor-summary')!;

  const save = async (values: Properties, geometry: Geometry): Promise<void> => {
    const body = { type: 'Feature', ...(featureId ? { id: featureId } : {}), geometry, properties: values };
    const headers = apiHeaders(config, { 'content-type': 'application/geo+json', accept: 'application/geo+json' });
    if (featureId && etag) headers['if-match'] = etag;
    let response: Response;
    try {
      if (!navigator.onLine) throw new TypeError('offline');
      response = await fetch(featureId ? `${config.apiUrl}/api/features/${encodeURIComponent(featureId)}` : `${config.apiUrl}/api/features`, {
        method: featureId ? 'PUT' : 'POST',
        headers,
        body: JSON.stringify(body),
        credentials: 'include',
      });
    } catch {
      await keepOffline(values, geometry);
      return;
    }
    if (response.ok) {
      const saved = (await response.json()) as Feature;
      status.textContent = t('editor.saved');
      location.assign(`/features/${encodeURIComponent(saved.id)}`);
      return;
    }
    const problem = await readProblem(response);
    if (response.status === 412 && featureId) {
      await showConflict(values, geometry);
      return;
    }
    if (problem.fields?.length) {
      submitted = true;
      for (const { field, message } of problem.fields) {
        const name = field.startsWith('properties.') ? (field.slice('properties.'.length).split(/[.[]/)[0] as FieldId) : field.startsWith('geometry') ? 'geometry' : undefined;
        if (name) setError(name, name === 'name' || name === 'kategorie' || name === 'telefon' || name === 'adresse' ? messageFor(t, name, message) : fieldMessage(t, message));
      }
      errorSummary.textContent = t('editor.errorSummary');
      focusFirstInvalid();
      return;
    }
    status.textContent = t('editor.saveFailed', { message: problemMessage(t, problem) });
  };

  /**
   * No network: the drawing and the attributes go to the outbox like any offline edit (a create with
   * an id made here and an Idempotency-Key; an edit based on the version this page was opened with,
   * sent with its If-Match), and sync sends them once the network is back.
   */
  const keepOffline = async (values: Properties, geometry: Geometry): Promise<void> => {
    const feature: Feature = { type: 'Feature', id: featureId ?? crypto.randomUUID(), geometry, properties: { ...(initial.feature?.properties ?? {}), ...values } };
    try {
      await recordSave(feature, !featureId, initial.feature ? { feature: initial.feature, etag } : undefined);
    } catch (error) {
      status.textContent = error instanceof StorageFailure && error.message === 'quota' ? t('offline.quota') : t('offline.storageFailed', { message: String((error as Error).message) });
      return;
    }
    status.textContent = t('editor.keptOffline');
    location.assign('/offline');
  };

  const focusFirstInvalid = () => (form.querySelector('[aria-invalid="true"]') as HTMLElement | null)?.focus();

  form.addEventListener('submit', (event) => {
    event.preventDefault();
    submitted = true;
    const errors = validate();
    if (errors.size > 0) {
      errorSummary.textContent = t('editor.errorSummary');
      focusFirstInvalid();
      return;
    }
    errorSummary.textContent = '';
    void save(properties(), editor.geometry()!);
  });

  // The conflict view: one row per field that differs; mine is preselected, so nothing typed is lost.
  const conflict = document.getElementById('conflict')!;
  const showConflict = async (mine: Properties, myGeometry: Geometry) => {
    const response = await fetch(`${config.apiUrl}/api/features/${encodeURIComponent(featureId!)}`, { headers: apiHeaders(config), credentials: 'include' });
    const theirs = (await response.json()) as Feature;
    const theirEtag = response.headers.get('etag');
    document.getElementById('theirs-heading')!.textContent = t('conflict.theirs', { version: theirs.properties.version ?? '?' });
    const rows = document.getElementById('conflict-rows')!;
    rows.replaceChildren();
    const theirProperties: Properties = {
      name: theirs.properties.name,
      kategorie: theirs.properties.kategorie,
      adresse: theirs.properties.adresse ?? null,
      telefon: theirs.properties.telefon ?? null,
    };
    const differing: Array<EditableField | 'geometry'> = [];
    for (const field of EDITABLE_FIELDS) if ((mine[field] ?? null) !== (theirProperties[field] ?? null)) differing.push(field);
    if (JSON.stringify(myGeometry) !== JSON.stringify(theirs.geometry)) differing.push('geometry');
    const show = (field: EditableField | 'geometry', value: unknown) =>
      field === 'geometry' ? summaryOf(value as Geometry) : field === 'kategorie' && value ? t(`kategorie.${String(value)}` as MessageKey) : String(value ?? '—');
    const summaryOf = (geometry: Geometry) => {
      const { parts, holes } = shapeSummary(geometry);
      return t('editor.geometrySummary', { type: t(`geometry.${geometry.type}`), parts, holes });
    };
    for (const field of differing) {
      const label = t(`field.${field}` as MessageKey);
      const row = document.createElement('tr');
      const cells = [label, show(field, field === 'geometry' ? myGeometry : mine[field]), show(field, field === 'geometry' ? theirs.geometry : theirProperties[field])];
      cells.forEach((text, index) => {
        const cell = document.createElement(index === 0 ? 'th' : 'td');
        if (index === 0) cell.setAttribute('scope', 'row');
        cell.textContent = text;
        row.append(cell);
      });
      const choice = document.createElement('td');
      choice.append(sideChoice({ name: `choice-${field}`, field: label, legend: t('conflict.choiceFor', { field: label }), mine: t('action.useMine'), theirs: t('action.useTheirs') }));
      row.append(choice);
      rows.append(row);
    }
    conflict.hidden = false;
    document.getElementById('conflict-title')!.focus();
    const conflictForm = document.getElementById('conflict-form') as HTMLFormElement;
    conflictForm.onsubmit = (event) => {
      event.preventDefault();
      const data = new FormData(conflictForm);
      const take = (field: string) => data.get(`choice-${field}`) === 'theirs';
      const merged: Properties = { ...mine };
      for (const field of EDITABLE_FIELDS) if (take(field)) merged[field] = theirProperties[field] as never;
      const geometry = take('geometry') ? theirs.geometry : myGeometry;
      setProperties(merged);
      editor.setGeometry(geometry);
      etag = theirEtag;
      conflict.hidden = true;
      void save(merged, geometry);
    };
  };

  // Delete (admin): a dialog asks first; the history stays.
  const dialog = document.getElementById('delete-dialog') as HTMLDialogElement | null;
  document.getElementById('delete')?.addEventListener('click', () => dialog?.showModal());
  dialog?.addEventListener('close', () => {
    if (dialog.returnValue !== 'confirm' || !featureId) return;
    void fetch(`${config.apiUrl}/api/features/${encodeURIComponent(featureId)}`, { method: 'DELETE', headers: apiHeaders(config, etag ? { 'if-match': etag } : {}), credentials: 'include' }).then(async (response) => {
      if (response.ok) location.assign('/features');
      else status.textContent = t('editor.saveFailed', { message: problemMessage(t, await readProblem(response)) });
    });
  });
}

/** The catalogue's wording of a schema issue; the schema's own message when the catalogue has none. */
function messageFor(t: Translate, field: FieldId, message: string): string {
  if (field === 'name' && message.includes('only spaces')) return t('error.blank');
  if (field === 'name') return message.includes('empty') ? t('error.required') : message.includes('at most') ? t('error.tooLong', { max: NAME_MAX }) : t('error.invalid', { message });
  if (field === 'kategorie') return t('error.kategorie');
  if (field === 'telefon') return message.includes('at most') ? t('error.tooLong', { max: 64 }) : t('error.telefon');
  if (field === 'adresse' && message.includes('at most')) return t('error.tooLong', { max: ADRESSE_MAX });
  return t('error.invalid', { message });
}

/**
 * The editor's history buttons and keys (iD's habits): Ctrl+Z and Ctrl+Shift+Z (or Ctrl+Y) undo and
 * redo, Esc drops the shape being drawn, Delete or Backspace removes the selected vertex, Space places a
 * vertex at the map centre and Enter finishes, a letter per tool, "?" the help panel. None of them acts
 * while the focus is in a text field or a list, where these keys edit text.
 */
function mountEditorKeys(editor: EditorHandle, t: Translate, pressTool: (tool: EditTool) => void, toolAvailable: (tool: EditTool) => boolean): void {
  const undo = document.getElementById('undo') as HTMLButtonElement;
  const redo = document.getElementById('redo') as HTMLButtonElement;
  const vertexStatus = document.getElementById('vertex-status')!;
  const mapElement = document.getElementById('map')!;
  const help = document.getElementById('editor-shortcuts') as HTMLDialogElement;
  undo.addEventListener('click', () => editor.undo());
  redo.addEventListener('click', () => editor.redo());
  document.getElementById('shortcuts-open')!.addEventListener('click', () => help.showModal());
  editor.onState((state) => {
    undo.disabled = !state.canUndo;
    redo.disabled = !state.canRedo;
    vertexStatus.textContent = state.vertexSelected ? t('editor.vertexSelected') : '';
  });
  const TOOL_KEYS: Record<string, EditTool> = { d: 'draw', v: 'modify', m: 'translate', h: 'hole', p: 'part' };
  document.addEventListener('keydown', (event) => {
    const target = event.target as HTMLElement;
    if (target.closest('input, textarea, select, [contenteditable="true"]') || help.open || document.querySelector('dialog[open]')) return;
    const onMap = target === mapElement || mapElement.contains(target);
    const key = event.key.toLowerCase();
    const command = event.ctrlKey || event.metaKey;
    let handled = true;
    if (command && key === 'z') {
      if (event.shiftKey) editor.redo();
      else editor.undo();
    }
    else if (command && key === 'y') editor.redo();
    else if (command || event.altKey) handled = false;
    else if (event.key === 'Escape') handled = editor.cancelDrawing();
    else if (event.key === 'Delete' || event.key === 'Backspace') handled = editor.removeSelectedVertex();
    else if (event.key === ' ' && onMap) editor.placeAtCentre();
    else if (event.key === 'Enter' && onMap) handled = editor.finishDrawing();
    else if (event.key === '?') help.showModal();
    else if (TOOL_KEYS[key] && toolAvailable(TOOL_KEYS[key])) pressTool(TOOL_KEYS[key]);
    else handled = false;
    if (handled) event.preventDefault();
  });
}
