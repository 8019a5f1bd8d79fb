/**
 * Entry point of the webhook server (`npm run webhook`, the container's command, the systemd unit):
 * start it (boot.ts), stop it on SIGTERM/SIGINT (running deploys get WEBHOOK_SHUTDOWN_GRACE_SECONDS),
 * re-read the secrets file on SIGHUP (secret rotation without a restart). Nothing else lives here.
 */
import { runMain } from '../../shared/config.js';
import { stopOnSignals } from '../../shared/shutdown.js';
import { startWebhookServer } from './boot.js';

runMain(async () => {
  let stopForRestart = (): void => {
    process.exit(1);
  };
  const running = await startWebhookServer({ onFatal: () => stopForRestart() });
  const { logger } = running;
  // Lost the root launcher (boot.ts): finish what can be finished, then exit 1 for a restart.
  stopForRestart = () => {
    process.exitCode = 1;
    void running.close().finally(() => process.exit(1));
  };
  stopOnSignals(logger, () => running.close());
  process.on('SIGHUP', () => {
    try {
      running.reloadSecrets();
    } catch (error) {
      logger.error({ err: (error as Error).message }, 'secrets reload failed; keeping the previous secrets');
    }
  });
});
