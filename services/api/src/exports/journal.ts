/**
 * Write-ahead journal ports for crash-safe exports. One journal is scoped to ONE export of ONE approved
 * feature version (one job); phase 2 backs it by columns on the export job row in Postgres, so a
 * record survives SIGKILL once `record*` has resolved.
 *
 * The invariant each exporter keeps: before it asks the remote side to create anything, it records
 * how to find that thing again (the OSM changeset id; the Wikibase intent token written into the edit
 * summary). A re-run that finds a record looks the result up instead of creating it a second time.
 */
export interface OsmExportJournal {
  /** The changeset an earlier attempt of this export opened, or null. */
  recordedChangeset(): Promise<number | null>;
  /** Must be durable when it resolves: the upload happens right after. */
  recordChangeset(changesetId: number): Promise<void>;
}

export interface WikibaseExportJournal {
  /** The intent token an earlier attempt of this export wrote into its edit summary, or null. */
  recordedIntent(): Promise<string | null>;
  recordIntent(token: string): Promise<void>;
}

export type ExportJournal = OsmExportJournal & WikibaseExportJournal;

/** An in-memory journal for tests and one-off CLI runs; it "survives" a simulated crash because the test keeps it. */
export function createMemoryJournal(): ExportJournal & { readonly entries: { changesetId: number | null; intent: string | null } } {
  const entries = { changesetId: null as number | null, intent: null as string | null };
  return {
    entries,
    recordedChangeset: () => Promise.resolve(entries.changesetId),
    recordChangeset: (changesetId) => {
      entries.changesetId = changesetId;
      return Promise.resolve();
    },
    recordedIntent: () => Promise.resolve(entries.intent),
    recordIntent: (token) => {
      entries.intent = token;
      return Promise.resolve();
    },
  };
}
