/**
 * The file journal's group commit (deployments/store.ts, file-journal.ts): a decision is applied at
 * once and written with every decision taken meanwhile in one append; a batch that cannot be written
 * is not taken, and neither is any decision that read it. The write failure is a real one: the
 * journal file made immutable (`chattr +i`, which stops even root), so these tests need root and a
 * filesystem with the immutable flag (ext4, xfs, btrfs); without them they skip, saying so.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { newDeployment } from '../src/deployments/deployer.js';
import { FileJournal } from '../src/deployments/file-journal.js';
import type { Deployment } from '../src/deployments/types.js';
import { makeTempDir } from './support/helpers.js';

const logger = pino({ level: 'silent' });

/** Why the immutable flag cannot be set on a file in a fresh temporary folder, or null when it can. */
function immutableFlagMissing(): string | null {
  const probe = join(makeTempDir('journal-probe'), 'probe');
  writeFileSync(probe, '');
  const set = spawnSync('chattr', ['+i', probe], { encoding: 'utf8' });
  if (set.error) return '`chattr` is not installed (apt-get install e2fsprogs)';
  if (set.status !== 0) return `\`chattr +i\` is refused here (needs root and a filesystem with the immutable flag): ${set.stderr.trim()}`;
  spawnSync('chattr', ['-i', probe]);
  return null;
}
const missing = immutableFlagMissing();
if (missing) console.warn(`skipping the file journal's write-failure tests: ${missing}`);

const immutable: string[] = [];
const chattr = (flag: '+i' | '-i', file: string): void => {
  const run = spawnSync('chattr', [flag, file], { encoding: 'utf8' });
  if (run.status !== 0) throw new Error(`chattr ${flag} ${file}: ${run.stderr}`);
  if (flag === '+i') immutable.push(file);
  else immutable.splice(immutable.indexOf(file), 1);
};
afterEach(() => {
  for (const file of [...immutable]) chattr('-i', file);
});

const deployment = (target: string, commit: string, deliveryId: string | null = null): Deployment =>
  newDeployment({ target: { key: target }, branch: target, provider: 'github', deliveryId }, commit.padEnd(40, '0'));

/** A push as the Deployer admits one: a delivery seen before is a duplicate, else the commit waits. */
function push(journal: FileJournal, target: string, commit: string, deliveryId: string): Promise<{ kind: 'duplicate' | 'queued'; id: string }> {
  return journal.inLane(target, { commit, deliveryId }, (lane, facts, writes) => {
    if (facts.seenDelivery) return { kind: 'duplicate' as const, id: facts.seenDelivery };
    const queued = deployment(target, commit, deliveryId);
    if (lane.waiting) writes.save({ ...lane.waiting, state: 'superseded', supersededBy: queued.id });
    writes.save(queued);
    writes.recordDelivery(deliveryId, queued.id);
    return { kind: 'queued' as const, id: queued.id };
  });
}

describe('the file journal: group commit', () => {
  it('decisions on one target taken while a write is under way see it, and all of them are written and read back after a restart', async () => {
    const dir = makeTempDir('journal-group');
    const journal = await FileJournal.open(dir, logger);
    // Forty pushes at once on one target, half of them redeliveries of the other half.
    const answers = await Promise.all(Array.from({ length: 40 }, (_, i) => push(journal, 'main', `c${i % 20}`, `delivery-${i % 20}`)));
    expect(answers.filter((a) => a.kind === 'queued')).toHaveLength(20);
    expect(answers.filter((a) => a.kind === 'duplicate')).toHaveLength(20);
    for (let i = 0; i < 20; i++) expect(answers[i + 20]).toEqual({ kind: 'duplicate', id: answers[i]!.id });
    const last = answers[19]!.id;
    expect(journal.store.lane('main').waiting?.id).toBe(last);
    await journal.close();

    const reopened = await FileJournal.open(dir, logger);
    expect(reopened.store.lane('main').waiting?.id).toBe(last);
    expect((await reopened.list({ limit: 100 })).filter((d) => d.state === 'superseded')).toHaveLength(19);
    await reopened.close();
  });
  it('remembers the newest delivery ids up to its bound, forgetting the oldest first, through compactions and a restart', async () => {
    const dir = makeTempDir('journal-deliveries');
    // Bounds this small make the journal compact every few pushes (past 2 × (3 + 5) lines).
    const bounds = { maxDeployments: 3, maxDeliveries: 5 };
    const journal = await FileJournal.open(dir, logger, bounds);
    const ids: string[] = [];
    for (let i = 0; i < 12; i++) ids.push((await push(journal, 'main', `c${i}`, `delivery-${i}`)).id);
    const remembered = (j: FileJournal) => Array.from({ length: 12 }, (_, i) => j.store.deploymentOfDelivery(`delivery-${i}`) ?? null);
    const expected = ids.map((id, i) => (i >= 7 ? id : null));
    expect(remembered(journal)).toEqual(expected);
    // A forgotten delivery id is news again; a remembered one is a duplicate.
    expect(await push(journal, 'main', 'c11', 'delivery-11')).toEqual({ kind: 'duplicate', id: ids[11] });
    await journal.close();

    const reopened = await FileJournal.open(dir, logger, bounds);
    expect(remembered(reopened)).toEqual(expected);
    // The order survived too: the next delivery makes the oldest one (7) forgotten, not another.
    await push(reopened, 'main', 'c12', 'delivery-12');
    expect(remembered(reopened)).toEqual(ids.map((id, i) => (i >= 8 ? id : null)));
    await reopened.close();
  });
});

describe.skipIf(missing)('the file journal: a write that fails', () => {
  it('is not taken, nor is a decision that read it; memory is the file again, and the next decision is written', async () => {
    const dir = makeTempDir('journal-failure');
    const file = join(dir, 'deployments.jsonl');
    const journal = await FileJournal.open(dir, logger);
    const first = await push(journal, 'main', 'c1', 'delivery-1');
    expect(first.kind).toBe('queued');

    chattr('+i', file);
    // Taken together: the second reads the first (its delivery id) before the first's write fails.
    const failing = push(journal, 'main', 'c2', 'delivery-2');
    const dependent = push(journal, 'main', 'c2', 'delivery-2');
    const [a, b] = await Promise.allSettled([failing, dependent]);
    expect(a.status).toBe('rejected');
    expect(b.status).toBe('rejected');
    // Nothing of either stayed: the lane waits for the first push again, and delivery-2 is unknown.
    expect(journal.store.lane('main').waiting?.id).toBe(first.id);
    expect(journal.store.deploymentOfDelivery('delivery-2')).toBeUndefined();
    expect((await journal.list({ limit: 10 })).map((d) => d.id)).toEqual([first.id]);

    chattr('-i', file);
    const again = await push(journal, 'main', 'c2', 'delivery-2');
    expect(again.kind).toBe('queued');
    expect(journal.store.lane('main').waiting?.id).toBe(again.id);
    await journal.close();

    // The file holds exactly what was taken: a restart reads the same.
    const reopened = await FileJournal.open(dir, logger);
    expect(reopened.store.lane('main').waiting?.id).toBe(again.id);
    expect(reopened.store.deploymentOfDelivery('delivery-2')).toBe(again.id);
    expect((await reopened.get(first.id))?.state).toBe('superseded');
    expect(readFileSync(file, 'utf8').split('\n').filter(Boolean).every((line) => JSON.parse(line))).toBe(true);
    await reopened.close();
  });

  it('refuses the next batch too when it was decided while the failing one was being written, even if it could be written', async () => {
    const dir = makeTempDir('journal-next-batch');
    const file = join(dir, 'deployments.jsonl');
    const journal = await FileJournal.open(dir, logger);
    const { store } = journal;
    const kept = deployment('main', 'c1');
    await store.save(kept);

    // The failure is over by the time the next batch is written (as a full disk that has room again):
    // that batch could be appended, but it was decided on the failed one, so it must not be.
    let attempts = 0;
    for (;;) {
      attempts++;
      chattr('+i', file);
      const lost = deployment('main', 'c2');
      const failing = store.save(lost);
      // Two microtasks close the batch holding `lost` and start its append (on libuv's threadpool);
      // its answer can only reach JavaScript in a later turn of the event loop.
      for (let i = 0; i < 10; i++) await Promise.resolve();
      const built = store.save({ ...lost, state: 'superseded', supersededBy: 'whatever' });
      // Blocking this thread, give the threadpool time to have the append refused, then let writes
      // through again before the event loop learns of the failure and turns to the next batch.
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 50);
      chattr('-i', file);
      const [a, b] = await Promise.allSettled([failing, built]);
      if (a.status === 'fulfilled' && attempts < 3) continue; // the append ran only after the flag was gone: again
      expect(a.status).toBe('rejected');
      expect(b.status).toBe('rejected');
      expect(store.get(lost.id)).toBeUndefined();
      expect(store.lane('main').waiting?.id).toBe(kept.id);
      await store.save({ ...kept, state: 'running' });
      await journal.close();
      const lines = readFileSync(file, 'utf8').split('\n').filter(Boolean).map((line) => JSON.parse(line) as { deployment?: Deployment });
      expect(lines.map((line) => line.deployment?.id)).not.toContain(lost.id);
      expect(lines.at(-1)?.deployment).toMatchObject({ id: kept.id, state: 'running' });
      return;
    }
  });

  it('refuses every further change when the file cannot even be read again after a failed write', async () => {
    const dir = makeTempDir('journal-broken');
    const file = join(dir, 'deployments.jsonl');
    const journal = await FileJournal.open(dir, logger);
    const first = await push(journal, 'main', 'c1', 'delivery-1');
    // The open journal now writes to a file that refuses writes, and its path names a folder.
    const moved = join(dir, 'moved.jsonl');
    renameSync(file, moved);
    mkdirSync(file);
    chattr('+i', moved);
    await expect(push(journal, 'main', 'c2', 'delivery-2')).rejects.toThrow();
    // Nothing is decided on a memory that no longer matches any file: not a push, not a duplicate.
    await expect(push(journal, 'main', 'c3', 'delivery-3')).rejects.toThrow(/could not be read again/);
    await expect(push(journal, 'main', 'c1', 'delivery-1')).rejects.toThrow(/could not be read again/);
    await expect(journal.store.flush()).rejects.toThrow(/restart the server/);
    expect(first.kind).toBe('queued');
  });
});
