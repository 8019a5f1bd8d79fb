import { KATEGORIEN } from '../../../shared/features/schema.js';
import type { Geometry } from '../../../shared/features/schema.js';
import type { MessageKey } from '../i18n/index.js';
import { shapeSummary } from '../lib/geometry.js';
import { readClientConfig } from '../lib/map.js';
import { offlineDb, type OutboxEntry, type StoredFeature } from '../lib/offline/db.js';
import { fieldValue, MERGE_FIELDS, setField, threeWayMerge, type MergeField } from '../lib/offline/merge.js';
import { discardEntry, recordDelete, recordSave, StorageFailure, updateEntry } from '../lib/offline/outbox.js';
import { fromMergeInput, mergeInput, saveMerged } from '../lib/offline/sync.js';
import { watchTables } from '../lib/offline/watch.js';
import { deleteRefusal, editRefusal } from '../lib/permissions.js';
import { problemMessage } from '../lib/problems.js';
import { sideChoice } from '../lib/side-choice.js';
import type { Feature } from '../lib/types.js';
import { clientTranslator } from './messages.js';
import { onSynced, syncNow, syncRunning, transport } from './offline-shell.js';

/**
 * The offline page: stored features (edit, delete, new), the outbox (open, change, discard), sync, and
 * the merge view of a conflict. Everything reads IndexedDB, so it works without network.
 */
export function mountOfflinePage(): void {
  const t = clientTranslator();
  const config = readClientConfig();
  const byId = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;
  const warnings = byId('offline-warnings');
  const connection = byId('connection');
  const showConnection = () => (connection.textContent = navigator.onLine ? t('offline.online') : t('offline.offline'));
  showConnection();
  window.addEventListener('online', showConnection);
  window.addEventListener('offline', showConnection);

  const syncStatus = byId('sync-status');
  onSynced((result) => {
    syncStatus.textContent = result.offline ? t('offline.syncOffline') : t('offline.synced', { count: result.sent });
    // A complete run: every conflict it met is in the outbox now; the first one (in edit order) opens.
    if (!result.offline)
      void offlineDb()
        .outbox.orderBy('seq')
        .toArray()
        .then((entries) => {
          latest = entries;
          openNextConflict();
        });
  });
  byId('sync-now').addEventListener('click', () => void syncNow());

  const storageError = (error: unknown) => {
    if (!(error instanceof StorageFailure)) throw error;
    warnings.textContent = error.message === 'quota' ? t('offline.quota') : t('offline.storageFailed', { message: error.message });
  };

  const kategorieLabel = (value: unknown) => ((KATEGORIEN as readonly string[]).includes(String(value)) ? t(`kategorie.${String(value)}` as MessageKey) : String(value ?? '—'));
  const show = (field: MergeField, value: unknown): string => {
    if (field === 'geometry') {
      const geometry = value as Geometry;
      const { parts, holes } = shapeSummary(geometry);
      const point = geometry.type === 'Point' ? ` (${geometry.coordinates.join(', ')})` : '';
      return `${t('editor.geometrySummary', { type: t(`geometry.${geometry.type}`), parts, holes })}${point}`;
    }
    if (field === 'kategorie') return kategorieLabel(value);
    return value === null || value === undefined || value === '' ? '—' : String(value);
  };
  const button = (label: string, onClick: () => void, kind = 'secondary') => {
    const element = document.createElement('button');
    element.type = 'button';
    element.className = kind;
    element.textContent = label;
    element.addEventListener('click', onClick);
    return element;
  };

  // The form: a new feature (a point) or a stored one.
  const formSection = byId('offline-form-section');
  const form = byId<HTMLFormElement>('offline-form');
  const field = (name: string) => byId<HTMLInputElement>(`of-${name}`);
  let editing: { feature: Feature | undefined } = { feature: undefined };
  const openForm = (feature: Feature | undefined) => {
    // A new object each time: the identity of a form session (see the submit handler).
    editing = { feature };
    byId('offline-form-title').textContent = feature ? t('offline.formEdit') : t('offline.formNew');
    field('name').value = feature?.properties.name ?? '';
    field('kategorie').value = feature?.properties.kategorie ?? '';
    field('adresse').value = feature?.properties.adresse ?? '';
    field('telefon').value = feature?.properties.telefon ?? '';
    const point = feature?.geometry.type === 'Point' ? feature.geometry.coordinates : undefined;
    field('longitude').value = point ? String(point[0]) : '';
    field('latitude').value = point ? String(point[1]) : '';
    byId('offline-form-error').textContent = '';
    formSection.hidden = false;
    byId('offline-form-title').focus();
  };
  byId('offline-new').addEventListener('click', () => openForm(undefined));
  byId('offline-form-cancel').addEventListener('click', () => (formSection.hidden = true));
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    const lon = Number(field('longitude').value.replace(',', '.'));
    const lat = Number(field('latitude').value.replace(',', '.'));
    const hasPoint = field('longitude').value.trim() !== '' && field('latitude').value.trim() !== '' && Math.abs(lon) <= 180 && Math.abs(lat) <= 90;
    const name = field('name').value.trim();
    const kategorie = field('kategorie').value;
    const keepsGeometry = editing.feature && editing.feature.geometry.type !== 'Point';
    if (!name || !kategorie || (!hasPoint && !keepsGeometry)) {
      byId('offline-form-error').textContent = !name ? `${t('field.name')}: ${t('error.required')}` : !kategorie ? t('error.kategorie') : t('error.longitude');
      return;
    }
    const geometry: Geometry = keepsGeometry ? editing.feature!.geometry : { type: 'Point', coordinates: [lon, lat] };
    const feature: Feature = {
      type: 'Feature',
      id: editing.feature?.id ?? crypto.randomUUID(),
      geometry,
      properties: { ...(editing.feature?.properties ?? {}), name, kategorie, adresse: field('adresse').value.trim() || null, telefon: field('telefon').value.trim() || null },
    };
    // The form may have been opened again for another feature before this save is stored (a quick
    // user, a slow disk): then closing "the form" would close that other edit under the user's hands.
    // Only the form session that made this save is closed by it.
    const session = editing;
    void recordSave(feature, !editing.feature)
      .then(() => {
        if (editing === session) formSection.hidden = true;
        syncStatus.textContent = t('offline.kept');
        if (navigator.onLine) void syncNow();
      })
      .catch(storageError);
  });

  // The stored features.
  const rows = byId('offline-features');
  const renderFeatures = (stored: StoredFeature[]) => {
    {
      byId('feature-count').textContent = t('offline.featureCount', { count: stored.length });
      rows.replaceChildren(
        ...stored
          .sort((a, b) => a.feature.properties.name.localeCompare(b.feature.properties.name))
          .map(({ feature }) => {
            const row = document.createElement('tr');
            const name = feature.properties.name;
            const cells = [name, kategorieLabel(feature.properties.kategorie), feature.properties.status ? t(`status.${feature.properties.status}` as MessageKey) : ''];
            for (const [index, text] of cells.entries()) {
              const cell = document.createElement(index === 0 ? 'th' : 'td');
              if (index === 0) cell.scope = 'row';
              cell.textContent = text;
              row.append(cell);
            }
            const actions = document.createElement('td');
            if (config.user) {
              // Only what the API would accept: a refused edit or delete would wait in the outbox and
              // fail at sync. What is not offered is said, once per row.
              const editBlocked = editRefusal(config.user, feature.properties);
              const deleteBlocked = deleteRefusal(config.user, feature.properties);
              if (!editBlocked) actions.append(button(t('offline.edit', { name }), () => openForm(feature)), ' ');
              if (!deleteBlocked) actions.append(button(t('offline.delete', { name }), () => void recordDelete(feature.id).then(() => { if (navigator.onLine) void syncNow(); }).catch(storageError), 'danger'));
              if (editBlocked) actions.append(Object.assign(document.createElement('span'), { className: 'refusal', textContent: t(editBlocked) }));
            }
            row.append(actions);
            return row;
          }),
      );
    }
  };
  // The table of kept features is long and not urgent: at most once a second while a sync runs.
  watchTables(['features'], () => offlineDb().features.toArray(), renderFeatures, 1_000);

  // The outbox.
  const list = byId('outbox-list');
  const nameOf = (entry: OutboxEntry) => entry.body?.properties.name ?? entry.base?.properties.name ?? entry.featureId;
  const stateText = (entry: OutboxEntry) =>
    entry.state === 'failed' ? t('offline.state.failed', { message: entry.lastProblem ? problemMessage(t, entry.lastProblem) : (entry.lastError ?? '') }) : t(`offline.state.${entry.state}` as MessageKey);
  const renderOutbox = (entries: OutboxEntry[]) => {
    {
      list.replaceChildren(
        ...(entries.length === 0
          ? [Object.assign(document.createElement('li'), { textContent: t('offline.outboxEmpty') })]
          : entries.map((entry) => {
              const item = document.createElement('li');
              const name = nameOf(entry);
              const text = document.createElement('span');
              text.textContent = `${t(`offline.kind.${entry.kind}` as MessageKey)}: ${name} (${stateText(entry)})`;
              item.append(text);
              if (entry.state === 'conflict' || entry.state === 'gone' || entry.kind !== 'delete') item.append(button(t('offline.open', { name }), () => openEntry(entry)));
              item.append(button(t('offline.discard', { name }), () => void discardEntry(entry.seq!).catch(storageError), 'danger'));
              return item;
            })),
      );
      latest = entries;
      // Not while this tab's sync runs: the features go out concurrently, so conflicts arrive in any
      // order; the merge views open once it is done, in the order the edits were made.
      if (!syncRunning()) openNextConflict();
    }
  };
  let latest: OutboxEntry[] = [];
  // A conflict opens the merge view by itself once sync meets it (each once; the outbox reopens it).
  const openNextConflict = () => {
    const conflict = latest.find((entry) => (entry.state === 'conflict' || entry.state === 'gone') && !shownConflicts.has(entry.seq!));
    if (conflict && mergeSection.hidden) {
      shownConflicts.add(conflict.seq!);
      openEntry(conflict);
    }
  };
  const closeMerge = () => {
    mergeSection.hidden = true;
    openNextConflict();
  };

  const openEntry = (entry: OutboxEntry) => {
    if (entry.state === 'conflict' || entry.state === 'gone') openMerge(entry);
    else if (entry.body) openForm(entry.body);
  };

  // The merge view: base, mine, theirs per field; a choice only where both sides changed.
  const mergeSection = byId('merge');
  const shownConflicts = new Set<number>();
  const mergeRows = byId('merge-rows');
  const mergeForm = byId<HTMLFormElement>('merge-form');
  const openMerge = (entry: OutboxEntry) => {
    const name = nameOf(entry);
    byId('merge-title').textContent = t('offline.mergeTitle', { name });
    const gone = entry.state === 'gone';
    const deleting = entry.kind === 'delete';
    byId('merge-intro').textContent = gone ? t('offline.goneIntro') : t('offline.mergeIntro');
    byId('restore-new').hidden = !gone;
    byId('delete-anyway').hidden = !(deleting && !gone);
    byId('merge-save').hidden = gone || deleting;
    mergeRows.replaceChildren();
    const mine = entry.body ? mergeInput(entry.body) : undefined;
    const theirs = entry.theirs ? mergeInput(entry.theirs) : undefined;
    const base = entry.base ? mergeInput(entry.base) : theirs;
    const outcome = mine && theirs && base ? threeWayMerge(base, mine, theirs) : undefined;
    for (const mergeField of MERGE_FIELDS) {
      const label = t(`field.${mergeField}` as MessageKey);
      const row = document.createElement('tr');
      const header = document.createElement('th');
      header.scope = 'row';
      header.textContent = label;
      row.append(header);
      for (const side of [base, mine, theirs]) {
        const cell = document.createElement('td');
        cell.textContent = side ? show(mergeField, fieldValue(side, mergeField)) : '—';
        row.append(cell);
      }
      const result = document.createElement('td');
      if (outcome?.conflicts.includes(mergeField)) {
        result.append(sideChoice({ name: `merge-${mergeField}`, field: label, legend: t('conflict.choiceFor', { field: label }), mine: t('offline.mine'), theirs: t('offline.theirs') }));
      } else if (outcome) {
        result.textContent = outcome.fromTheirs.includes(mergeField)
          ? t('offline.auto', { side: t('offline.theirs') })
          : JSON.stringify(fieldValue(base!, mergeField)) !== JSON.stringify(fieldValue(mine!, mergeField))
            ? t('offline.auto', { side: t('offline.mine') })
            : t('offline.unchanged');
      }
      row.append(result);
      mergeRows.append(row);
    }
    mergeForm.onsubmit = (event) => {
      event.preventDefault();
      if (!outcome) return;
      const data = new FormData(mergeForm);
      const merged = { properties: { ...outcome.merged.properties }, geometry: outcome.merged.geometry };
      for (const conflicted of outcome.conflicts) if (data.get(`merge-${conflicted}`) === 'theirs') setField(merged, conflicted, fieldValue(theirs!, conflicted));
      void saveMerged(transport(), entry, fromMergeInput(entry.featureId, merged)).then((saved) => {
        if (saved) closeMerge();
      });
    };
    byId('restore-new').onclick = () => {
      const id = crypto.randomUUID();
      const body = { ...entry.body!, id };
      void offlineDb()
        .transaction('rw', offlineDb().outbox, offlineDb().features, async () => {
          await offlineDb().features.delete(entry.featureId);
          await updateEntry(entry.seq!, { kind: 'create', featureId: id, body, base: null, baseEtag: null, idempotencyKey: crypto.randomUUID(), state: 'pending', theirs: null, theirsEtag: null });
        })
        .then(() => {
          closeMerge();
          void syncNow();
        })
        .catch(storageError);
    };
    byId('delete-anyway').onclick = () => {
      void updateEntry(entry.seq!, { baseEtag: entry.theirsEtag, state: 'pending' }).then(() => {
        closeMerge();
        void syncNow();
      });
    };
    mergeSection.hidden = false;
    byId('merge-title').focus();
  };
  // Registered last: a render may open the merge view, which needs everything above.
  watchTables(['outbox'], () => offlineDb().outbox.orderBy('seq').toArray(), renderOutbox);
}
