import type { Logger } from 'pino';

/**
 * The stop of every long-running entry point: on the first SIGTERM or SIGINT, log it, run `close`
 * (drain requests, finish jobs, close pools), then exit 0 — or 1 when closing failed. A second signal
 * while closing is ignored rather than starting a second, overlapping close.
 */
export function stopOnSignals(logger: Logger, close: () => Promise<void>): void {
  let stopping = false;
  const stop = (signal: NodeJS.Signals): void => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal }, 'shutting down');
    close().then(
      () => process.exit(0),
      (error: unknown) => {
        logger.error({ err: error }, 'shutdown failed');
        process.exit(1);
      },
    );
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
}
