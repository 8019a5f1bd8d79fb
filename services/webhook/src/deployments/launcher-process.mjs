// The deploy launcher: a small helper process (plain Node, no loader) that starts deploy scripts
// for the webhook server, ends their process groups and reports their exit.
//
// Why a separate process:
// - on Linux, starting a process forks the parent first, which copies its page tables. In a server
//   holding many 1 MB request bodies that blocked the event loop for 20–40 ms per deploy; forked
//   from this process (a few tens of MB) it takes about a millisecond;
// - privilege separation: it is forked before the server gives up root (WEBHOOK_USER), so it can
//   start the deploy script as root (which runs each build as the target's own user) and signal
//   the whole process group, while the server holding the network and the secrets cannot.
//   It never trusts the server with what to run: the script, the argument template and the
//   environment of every target come once, in the first message (`plan`), from the server's
//   configuration at start; later requests only name a target, a branch, a commit and a log file.
// - its own environment is PATH alone (see launcher.ts): nothing secret to read in /proc.
//
// Protocol (IPC, JSON):
//   server → launcher  { type: 'plan', script, targets: { [key]: { args, env, logDir } } }   (once, first)
//                      { type: 'start', id, key, branch, commit, logPath }
//                      { type: 'signal', id, signal }   signal the deploy's whole process group
//                      { type: 'live', id, key }        what is live for a target
//                      { type: 'end-orphans' }          look for orphans again (below)
//   launcher → server  { type: 'started', id, pid }
//                      { type: 'exited', id, exitCode, signal, spawnError }
//                      { type: 'live', id, commit, release }   (null when nothing is live)
//                      { type: 'orphan', key, pid, ended }      a deploy a previous launcher left running
//
// Restarts: every deploy this launcher starts is recorded in `<logDir>/.running-deploy` (its pid
// and the kernel's start time of that pid, so a reused pid is never mistaken for it) until it has
// exited. A launcher that dies outright (SIGKILL, OOM, `systemctl kill`) cannot end its deploys;
// they would keep running with no time limit, holding the target's lock. So when a launcher gets
// its plan, it first looks for such records: a deploy script still running under one is stopped
// (SIGTERM to its process group, so the script's trap puts the previous release back and frees the
// lock; SIGKILL after ORPHAN_GRACE_MS), and the record is removed. With replicas on one host (one
// DEPLOY_ROOT, a shared journal), the server asks again (`end-orphans`) when it has found another
// replica gone: a deploy whose launcher died with that replica is stopped the same way, while one
// still under a live launcher (another replica's) is left alone.
// The live commit is read here because under isolation only root (and the site) may read a
// target's directory; the server may not. REVISION is written by the deploy script as root after
// sealing, but a release sealed by an older script may hold what its build left there (a FIFO, a
// link to a root-only file, gigabytes): it is opened without following a link or waiting for a
// writer, read only when it is a small regular file, within a time limit, off the event loop, and
// reported only when it is a commit id — so nothing of a target can stall this process or reach the
// server's journal.
// `args` is the argument template: '{branch}' and '{commit}' are replaced, everything else is fixed.
import { spawn } from 'node:child_process';
import { closeSync, mkdirSync, openSync, readFileSync, readlinkSync, renameSync, unlinkSync, writeFileSync, writeSync } from 'node:fs';
import { dirname, join, resolve, sep } from 'node:path';
import { COMMIT_ID, RELEASE_NAME, readRevisionFile } from '../../../shared/revision-file.mjs';

const reply = (message) => {
  if (process.connected) process.send(message);
};

let plan = null;
/** Running deploys: id → process group id. */
const running = new Map();

const BRANCH = /^[^\0-\x20\x7f~^:?*[\\]{1,255}$/;

function signalGroup(pid, signal) {
  try {
    process.kill(-pid, signal);
  } catch {
    // the group is already gone
  }
}

/** How long an orphaned deploy gets to restore the previous release after SIGTERM. */
const ORPHAN_GRACE_MS = 20_000;

const recordOf = (target) => join(target.logDir, '.running-deploy');

/** The kernel's start time of a process (clock ticks since boot), or null when it is gone. */
function startTimeOf(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return fields[0] === 'Z' ? null : fields[19];
  } catch {
    return null;
  }
}

function underLauncher(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const parent = stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1];
    return readFileSync(`/proc/${parent}/cmdline`, 'utf8').includes('launcher-process.mjs');
  } catch {
    return false;
  }
}

// Written whole or not at all (a temporary file renamed over the record): a launcher killed while
// writing must not leave an empty or half-written record, which the next launcher would read as
// "that deploy is gone" and remove, leaving the deploy running with nothing to stop it.
function record(target, pid) {
  const pending = `${recordOf(target)}.${process.pid}`;
  try {
    mkdirSync(target.logDir, { recursive: true, mode: 0o700 });
    writeFileSync(pending, `${pid} ${startTimeOf(pid)}\n`, { mode: 0o600 });
    renameSync(pending, recordOf(target));
  } catch {
    // without a record a restart cannot find this deploy; it still runs under this launcher
  }
}

function forget(target, pid) {
  try {
    if (readFileSync(recordOf(target), 'utf8').split(' ')[0] === String(pid)) unlinkSync(recordOf(target));
  } catch {
    // no record
  }
}

/** Stop deploys that a previous launcher started and left running (see the header). */
function endOrphans() {
  for (const [key, target] of Object.entries(plan.targets)) {
    let pid;
    let started;
    try {
      [pid, started] = readFileSync(recordOf(target), 'utf8').trim().split(' ');
    } catch {
      continue;
    }
    pid = Number(pid);
    const alive = Number.isSafeInteger(pid) && pid > 1 && startTimeOf(pid) === started;
    // Still under a live launcher (a second server on the same directories, which systemd never
    // starts): not an orphan, and not ours to end.
    if (alive && underLauncher(pid)) continue;
    try {
      unlinkSync(recordOf(target));
    } catch {
      // removed meanwhile
    }
    if (!alive) continue;
    signalGroup(pid, 'SIGTERM');
    const deadline = Date.now() + ORPHAN_GRACE_MS;
    const check = () => {
      if (startTimeOf(pid) !== started) return reply({ type: 'orphan', key, pid, ended: 'SIGTERM' });
      if (Date.now() < deadline) return void setTimeout(check, 50);
      signalGroup(pid, 'SIGKILL');
      reply({ type: 'orphan', key, pid, ended: 'SIGKILL' });
    };
    check();
  }
}

function invocationOf({ key, branch, commit, logPath }) {
  const target = plan && Object.hasOwn(plan.targets, key) ? plan.targets[key] : undefined;
  if (!target) throw new Error(`unknown target ${String(key)}`);
  if (typeof branch !== 'string' || !BRANCH.test(branch)) throw new Error('invalid branch');
  if (typeof commit !== 'string' || !COMMIT_ID.test(commit)) throw new Error('invalid commit');
  if (typeof logPath !== 'string' || dirname(resolve(logPath)) + sep !== resolve(target.logDir) + sep) throw new Error('log outside the target log directory');
  const args = target.args.map((arg) => (arg === '{branch}' ? branch : arg === '{commit}' ? commit : arg));
  return { args, env: { ...target.env, DEPLOY_LOG: logPath } };
}

function start(request) {
  const { id, logPath } = request;
  let logFd;
  let child;
  try {
    const { args, env } = invocationOf(request);
    mkdirSync(dirname(logPath), { recursive: true, mode: 0o700 });
    logFd = openSync(logPath, 'a', 0o600);
    writeSync(logFd, `${new Date().toISOString()} ${plan.script} ${JSON.stringify(args)}\n`);
    child = spawn(plan.script, args, {
      env,
      detached: true, // its own process group, ended as a whole
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
  const target = plan.targets[request.key];
  if (child.pid !== undefined) {
    running.set(id, child.pid);
    record(target, child.pid);
    reply({ type: 'started', id, pid: child.pid });
  }
  let reported = false;
  const exited = (result) => {
    if (reported) return;
    reported = true;
    // However the script ended (success, failure, SIGKILL), nothing it started outlives it: a
    // build still running would hold the target for the next deploy.
    if (child.pid !== undefined) {
      signalGroup(child.pid, 'SIGKILL');
      forget(target, child.pid);
    }
    running.delete(id);
    reply({ type: 'exited', id, ...result });
    if (disconnected && running.size === 0) process.exit(0);
  };
  child.once('error', (error) => exited({ exitCode: null, signal: null, spawnError: error.message }));
  child.once('exit', (exitCode, signal) => exited({ exitCode, signal, spawnError: null }));
}

async function live({ id, key }) {
  const target = plan && Object.hasOwn(plan.targets, key) ? plan.targets[key] : undefined;
  let commit = null;
  let release = null;
  if (target) {
    try {
      // `live` and deploys/ are root's; the name is checked all the same before it becomes a path.
      const name = readlinkSync(join(target.deployDir, 'live')).split('/').pop();
      if (RELEASE_NAME.test(name)) release = name;
    } catch {
      // nothing live (yet)
    }
  }
  if (release) commit = await readRevisionFile(join(target.deployDir, 'deploys', release, 'REVISION'));
  reply({ type: 'live', id, commit, release });
}

process.on('message', (message) => {
  if (!message || typeof message !== 'object') return;
  if (message.type === 'plan' && plan === null) {
    plan = message;
    endOrphans();
  }
  else if (message.type === 'start') start(message);
  else if (message.type === 'live') void live(message);
  else if (message.type === 'end-orphans' && plan !== null) endOrphans();
  else if (message.type === 'signal' && (message.signal === 'SIGTERM' || message.signal === 'SIGKILL')) {
    const pid = running.get(message.id);
    if (pid !== undefined) signalGroup(pid, message.signal);
  }
});
// The server is gone (or let go of us): nothing left to report to. Running deploys are stopped
// (SIGTERM: the deploy script keeps or restores the previous release); a deploy nobody watches
// would hold its target's lock with no time limit.
let disconnected = false;
process.on('disconnect', () => {
  disconnected = true;
  for (const pid of running.values()) signalGroup(pid, 'SIGTERM');
  if (running.size === 0) process.exit(0);
  setTimeout(() => {
    for (const pid of running.values()) signalGroup(pid, 'SIGKILL');
    process.exit(0);
  }, 10_000);
});
