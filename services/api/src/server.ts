/**
 * `npm run api`: the feature API alone. Configuration from the environment (see config.ts);
 * SIGTERM/SIGINT drain in-flight requests, close the pool and exit 0 — also during start-up.
 * Exit codes: 0 stopped cleanly, 1 failed, 2 bad configuration.
 *
 * The signal handlers come first, before the API's modules load (seconds under tsx on a busy
 * machine): a signal then is remembered instead of killing the process. No static imports here for
 * that reason (but node:path, a built-in, and types). A parent that spawned us with an IPC channel
 * (npm start) is told once they are in place.
 */
import { resolve } from 'node:path';
import type { Logger } from 'pino';
import type { EmbeddedLog } from './db/embedded.js';

let earlySignal: NodeJS.Signals | undefined;
const remember = (signal: NodeJS.Signals): void => {
  earlySignal ??= signal;
};
process.on('SIGTERM', remember);
process.on('SIGINT', remember);
if (process.send) {
  process.send({ signals: 'handled' });
  process.channel?.unref();
}

// Under npm start the embedded database opens in a thread of its own (API_EMBEDDED_DB_THREAD is its
// compiled module, set by scripts/start.ts), begun before anything else loads so that it runs while
// this thread loads the API; startApi takes it over. It needs only DATABASE_URL (unset) and
// DATA_DIR, read here as config.ts reads them; the full configuration is checked right after.
const { apiDatabaseOptions, startEmbeddedDatabase } = await import('./db/embedded.js');
const thread = process.env.API_EMBEDDED_DB_THREAD;
const earlyDataDir = resolve(process.env.DATA_DIR || './data');
// Its log lines wait for the API's logger, which exists only once the configuration is read.
let log: Logger | undefined;
const waiting: Array<() => void> = [];
const earlyLog: EmbeddedLog = {
  info: (fields, message) => (log ? log.info(fields, message) : waiting.push(() => log!.info(fields, message))),
  warn: (fields, message) => (log ? log.warn(fields, message) : waiting.push(() => log!.warn(fields, message))),
};
const early = thread && !process.env.DATABASE_URL && !earlySignal ? startEmbeddedDatabase({ ...apiDatabaseOptions(earlyDataDir, earlyLog), thread }) : undefined;
early?.catch(() => undefined); // handled by startApi, or below when it is not used

// The rest of the API loads meanwhile: importing only sets its modules up; startApi (below) starts things.
const apiModules = Promise.all([import('./boot.js'), import('../../shared/shutdown.js')]);
apiModules.catch(() => undefined); // awaited below
const [{ runMain }, { createLogger }, { loadApiConfig }] = await Promise.all([import('../../shared/config.js'), import('../../shared/logger.js'), import('./config.js')]);

/** Closes the early database if it is not going to be used (it finishes its start first). */
const dropEarly = async (): Promise<void> => void (await (await early?.catch(() => undefined))?.close());

runMain(async () => {
  let config: ReturnType<typeof loadApiConfig>;
  try {
    config = loadApiConfig();
  } catch (error) {
    await dropEarly();
    throw error;
  }
  const logger = createLogger('api', { level: config.logLevel });
  log = logger;
  for (const line of waiting.splice(0)) line();
  let embedded = early;
  if (early && (config.databaseUrl || config.dataDir !== earlyDataDir)) {
    await dropEarly();
    embedded = undefined;
  }
  const [{ startApi, StartAborted }, { stopOnSignals }] = await apiModules;
  const abort = new AbortController();
  const start: { running?: ReturnType<typeof startApi> } = {};
  // A signal during start-up stops the start at its next safe point (never inside initdb or a
  // migration), closes what it opened and exits 0, instead of dying with the data folder locked.
  // Installed before startApi runs a single line: its synchronous part (locking the data folder,
  // restoring a database image) must not be a moment without a handler.
  const stop = stopOnSignals(logger, async () => {
    abort.abort();
    // Stopped before the start began: nothing but the database was opened. It finishes its start
    // (never cut short inside initdb), closes and releases the data folder.
    if (!start.running) return void (await (await embedded?.catch(() => undefined))?.close());
    const api = await start.running.catch(() => undefined);
    await api?.close();
  });
  // Only now do the early handlers go. Removing a signal's last listener closes node's handle for
  // it, and a signal that arrived but was not yet dispatched (during the modules' synchronous
  // evaluation just before this line, say) is then lost: the stop handler must be there first.
  process.off('SIGTERM', remember);
  process.off('SIGINT', remember);
  if (earlySignal) return stop(earlySignal);
  start.running = startApi(config, logger, abort.signal, embedded ? { embedded } : {});
  await start.running.catch((error: unknown) => {
    if (error instanceof StartAborted) return new Promise<never>(() => undefined); // stopOnSignals exits
    throw error;
  });
});
