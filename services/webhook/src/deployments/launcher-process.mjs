// The deploy launcher: a small helper process (plain Node, no loader) that starts deploy scripts
// for the webhook server and reports their exit.
//
// Why a separate process: on Linux, starting a process forks the parent first, which copies its
// page tables. In a server holding many 1 MB request bodies that blocked the event loop for
// 20–40 ms per deploy; forked from this process (a few tens of MB) it takes about a millisecond.
//
// Protocol (IPC, JSON):
//   server → launcher  { type: 'start', id, script, args, env, logPath }
//   launcher → server  { type: 'started', id, pid }
//                      { type: 'exited', id, exitCode, signal, spawnError }
// Signals (time limit, shutdown) are sent by the server straight to the deploy's process group.
import { spawn } from 'node:child_process';
import { closeSync, mkdirSync, openSync, writeSync } from 'node:fs';
import { dirname } from 'node:path';

const reply = (message) => {
  if (process.connected) process.send(message);
};

function start({ id, script, args, env, logPath }) {
  let logFd;
  let child;
  try {
    mkdirSync(dirname(logPath), { recursive: true });
    logFd = openSync(logPath, 'a', 0o640);
    writeSync(logFd, `${new Date().toISOString()} ${script} ${JSON.stringify(args)}\n`);
    child = spawn(script, args, {
      env,
      detached: true, // its own process group, stopped as a whole
      stdio: ['ignore', logFd, logFd],
      shell: false,
    });
  } catch (error) {
    // Synchronous refusals (e.g. an argument Node cannot pass) are failed deploys, not crashes.
    if (logFd !== undefined) writeSync(logFd, `could not start the deploy script: ${error.message}\n`);
    reply({ type: 'exited', id, exitCode: null, signal: null, spawnError: error.message });
    return;
  } finally {
    if (logFd !== undefined) closeSync(logFd);
  }
  if (child.pid !== undefined) reply({ type: 'started', id, pid: child.pid });
  let reported = false;
  const exited = (result) => {
    if (reported) return;
    reported = true;
    reply({ type: 'exited', id, ...result });
  };
  child.once('error', (error) => exited({ exitCode: null, signal: null, spawnError: error.message }));
  child.once('exit', (exitCode, signal) => exited({ exitCode, signal, spawnError: null }));
}

process.on('message', (message) => {
  if (message && message.type === 'start') start(message);
});
// The server is gone (or let go of us): nothing left to report to. Running deploys live on in
// their own process groups, exactly as if the server had started them itself.
process.on('disconnect', () => process.exit(0));
