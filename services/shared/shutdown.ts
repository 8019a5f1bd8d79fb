import type { Logger } from 'pino';

/**
 * The stop of every long-running entry point: on the first SIGTERM or SIGINT, log it, run `close`
 * (drain requests, finish jobs, close pools), then exit 0 — or 1 when closing failed. A second signal
 * while closing is ignored rather than starting a second, overlapping close.
 *
 * Returns the stop itself, for a signal the caller caught before this was installed. A caller that
 * had its own early listeners removes them only after this call: removing a signal's last listener
 * closes node's handle for it, and a signal already received but not yet dispatched is then lost.
 */
export function stopOnSignals(logger: Logger, close: () => Promise<void>): (signal: NodeJS.Signals) => void {
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
  // on, not once: a second SIGTERM after the first one's listener was gone would kill the process.
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  return stop;
}
