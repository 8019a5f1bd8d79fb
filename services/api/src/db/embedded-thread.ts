/**
 * The worker thread that runs the embedded database for startEmbeddedDatabase({ thread }) in
 * embedded.ts: it opens PGlite with the options it is given, serves it on its port, reports
 * readiness (and its log lines) to the thread that started it, and answers saveImage and close.
 * After close the thread has nothing left to run and ends.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { startEmbeddedDatabase, type EmbeddedDatabase, type EmbeddedDatabaseOptions, type EmbeddedLog, type ThreadReply, type ThreadRequest } from './embedded.js';

const port = parentPort!;
const reply = (message: ThreadReply): void => port.postMessage(message);
const logger: EmbeddedLog = {
  info: (fields, message) => reply({ log: { level: 'info', fields, message } }),
  warn: (fields, message) => reply({ log: { level: 'warn', fields, message } }),
};

let database: EmbeddedDatabase;
try {
  database = await startEmbeddedDatabase({ ...(workerData as EmbeddedDatabaseOptions), logger });
} catch (error) {
  reply({ failed: error });
  port.close();
  throw error;
}
reply({ ready: { url: database.url, origin: database.origin } });
port.on('message', (request: ThreadRequest) => {
  void (async () => {
    try {
      await database[request.call]();
      reply({ done: request.call });
    } catch (error) {
      reply({ done: request.call, error });
    }
    if (request.call === 'close') port.close();
  })();
});
