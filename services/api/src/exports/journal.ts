import type { OsmConflationDecision } from './conflation/osm.js';
import type { WikibaseConflationDecision } from './conflation/wikibase.js';
import { closeSync, fsyncSync, openSync, readFileSync, renameSync, writeSync } from 'node:fs';

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
  /**
   * The conflation decision of this export (automatic or a reviewer's), or null before the lookup.
   * Recorded before anything is written, so a re-run neither looks up again nor decides differently.
   */
  recordedDecision(): Promise<OsmConflationDecision | null>;
  recordDecision(decision: OsmConflationDecision): Promise<void>;
  /** The changeset an earlier attempt of this export opened, or null. */
  recordedChangeset(): Promise<number | null>;
  /** Must be durable when it resolves: the upload happens right after. */
  recordChangeset(changesetId: number): Promise<void>;
}

export interface WikibaseExportJournal {
  /** The item conflation decided on for this export (automatic or a reviewer's), or null before it ran. */
  recordedMatch(): Promise<WikibaseConflationDecision | null>;
  recordMatch(decision: WikibaseConflationDecision): Promise<void>;
  /** The intent token an earlier attempt of this export wrote into its edit summary, or null. */
  recordedIntent(): Promise<string | null>;
  recordIntent(token: string): Promise<void>;
}

export type ExportJournal = OsmExportJournal & WikibaseExportJournal;

/** An in-memory journal for tests and one-off CLI runs; it "survives" a simulated crash because the test keeps it. */
interface JournalEntries {
  changesetId: number | null;
  intent: string | null;
  decision?: OsmConflationDecision | null;
  match?: WikibaseConflationDecision | null;
}

export function createMemoryJournal(): ExportJournal & { readonly entries: JournalEntries } {
  const entries: JournalEntries = { changesetId: null, intent: null, decision: null, match: null };
  return {
    entries,
    recordedMatch: () => Promise.resolve(entries.match ?? null),
    recordMatch: (match) => {
      entries.match = match;
      return Promise.resolve();
    },
    recordedDecision: () => Promise.resolve(entries.decision ?? null),
    recordDecision: (decision) => {
      entries.decision = decision;
      return Promise.resolve();
    },
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

/**
 * A journal in a JSON file, written with fsync before `record*` resolves: for one-off CLI exports and
 * for the process-kill tests. Production backs the ports by the job row in Postgres.
 */
export function createFileJournal(path: string): ExportJournal {
  const read = (): JournalEntries => {
    try {
      return JSON.parse(readFileSync(path, 'utf8')) as JournalEntries;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return { changesetId: null, intent: null };
      throw error;
    }
  };
  const write = (entries: JournalEntries) => {
    const temp = `${path}.tmp`;
    const fd = openSync(temp, 'w');
    try {
      writeSync(fd, JSON.stringify(entries));
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(temp, path);
  };
  return {
    recordedDecision: () => Promise.resolve(read().decision ?? null),
    recordDecision: (decision) => Promise.resolve(write({ ...read(), decision })),
    recordedMatch: () => Promise.resolve(read().match ?? null),
    recordMatch: (match) => Promise.resolve(write({ ...read(), match })),
    recordedChangeset: () => Promise.resolve(read().changesetId),
    recordChangeset: (changesetId) => Promise.resolve(write({ ...read(), changesetId })),
    recordedIntent: () => Promise.resolve(read().intent),
    recordIntent: (intent) => Promise.resolve(write({ ...read(), intent })),
  };
}
