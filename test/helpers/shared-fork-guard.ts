/**
 * Setup file of the "shared" project (vitest.config.ts): its test files run one after another in a
 * kept fork, so a file must leave the process as it found it. This compares the process-wide state a
 * file can change, before its first hook and after its last one, and fails the file that changed it,
 * naming what changed. Such a file goes on the ISOLATED list of vitest.config.ts, or undoes the
 * change in its afterAll.
 *
 * The snapshot is taken after the file's imports ran: a module that installs a listener once, when it
 * is first loaded, is not the file's doing. Not compared: the 'exit' and 'beforeExit' listeners of
 * on-exit-leak-free (pino's streams), which that library adds when a stream opens and removes when the
 * last one is closed or collected, so they come and go with the garbage collector.
 */
import { afterAll, beforeAll } from 'vitest';

const PROCESS_EVENTS = ['SIGTERM', 'SIGINT', 'SIGHUP', 'SIGUSR1', 'SIGUSR2', 'exit', 'beforeExit', 'uncaughtException', 'unhandledRejection', 'warning'] as const;

type Listener = (...args: unknown[]) => unknown;

interface Snapshot {
  env: Record<string, string | undefined>;
  cwd: string;
  listeners: Map<string, Listener[]>;
  globals: Set<string>;
}

/** on-exit-leak-free's own two listeners (onExit, onBeforeExit: `callRefs('exit')`). */
const collectedWithStreams = (listener: Listener) => /^function on(Before)?Exit\b/.test(String(listener)) && String(listener).includes('callRefs(');

function snapshot(): Snapshot {
  return {
    env: { ...process.env },
    cwd: process.cwd(),
    listeners: new Map(PROCESS_EVENTS.map((event) => [event, ((process as NodeJS.EventEmitter).listeners(event) as Listener[]).filter((l) => !collectedWithStreams(l))])),
    globals: new Set(Object.getOwnPropertyNames(globalThis)),
  };
}

const describeListener = (listener: Listener) => String(listener).split('\n')[0]!.slice(0, 80);

function differences(before: Snapshot, after: Snapshot): string[] {
  const found: string[] = [];
  for (const key of new Set([...Object.keys(before.env), ...Object.keys(after.env)])) {
    if (before.env[key] !== after.env[key]) found.push(`process.env.${key} ${before.env[key] === undefined ? 'set' : after.env[key] === undefined ? 'deleted' : 'changed'}`);
  }
  if (before.cwd !== after.cwd) found.push(`the working directory changed to ${after.cwd}`);
  for (const event of PROCESS_EVENTS) {
    const [was, is] = [before.listeners.get(event)!, after.listeners.get(event)!];
    for (const listener of is) if (!was.includes(listener)) found.push(`a process '${event}' listener added: ${describeListener(listener)}`);
    for (const listener of was) if (!is.includes(listener)) found.push(`a process '${event}' listener removed: ${describeListener(listener)}`);
  }
  for (const name of after.globals) if (!before.globals.has(name)) found.push(`globalThis.${name} added`);
  for (const name of before.globals) if (!after.globals.has(name)) found.push(`globalThis.${name} removed`);
  return found;
}

let before: Snapshot | undefined;

beforeAll(() => {
  before = snapshot();
});

afterAll(() => {
  if (!before) return;
  const found = differences(before, snapshot());
  if (found.length > 0) {
    throw new Error(`this file runs in a shared fork (vitest.config.ts, project "shared") and left process-wide state behind for the next file: ${found.join('; ')}. Undo it in afterAll, or put the file on the ISOLATED list of vitest.config.ts`);
  }
});
