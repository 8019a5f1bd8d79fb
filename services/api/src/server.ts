/**
 * `npm run api`: the feature API alone. Configuration from the environment (see config.ts);
 * SIGTERM/SIGINT drain in-flight requests, close the pool and exit 0 — also during start-up.
 * Exit codes: 0 stopped cleanly, 1 failed, 2 bad configuration.
 *
 * The signal handlers come first, before the API's modules load (seconds under tsx on a busy
 * machine): a signal then is remembered instead of killing the process. No static imports here for
 * that reason. A parent that spawned us with an IPC channel (npm start) is told once they are in place.
 */
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

const [{ runMain }, { createLogger }, { startApi, StartAborted }, { loadApiConfig }, { stopOnSignals }] = await Promise.all([
  import('../../shared/config.js'),
  import('../../shared/logger.js'),
  import('./boot.js'),
  import('./config.js'),
  import('../../shared/shutdown.js'),
]);

runMain(async () => {
  const config = loadApiConfig();
  const logger = createLogger('api', { level: config.logLevel });
  process.off('SIGTERM', remember);
  process.off('SIGINT', remember);
  if (earlySignal) {
    // Nothing was opened yet: stopping is exiting.
    logger.info({ signal: earlySignal }, 'shutting down before start');
    process.exit(0);
  }
  const abort = new AbortController();
  const start: { running?: ReturnType<typeof startApi> } = {};
  // A signal during start-up stops the start at its next safe point (never inside initdb or a
  // migration), closes what it opened and exits 0, instead of dying with the data folder locked.
  // Installed before startApi runs a single line: its synchronous part (locking the data folder,
  // restoring a database image) must not be a moment without a handler.
  stopOnSignals(logger, async () => {
    abort.abort();
    const api = await start.running?.catch(() => undefined);
    await api?.close();
  });
  start.running = startApi(config, logger, abort.signal);
  await start.running.catch((error: unknown) => {
    if (error instanceof StartAborted) return new Promise<never>(() => undefined); // stopOnSignals exits
    throw error;
  });
});
