/**
 * Every process the rehearsal starts, whatever user it becomes and however it detaches (`setsid`, a
 * daemon's double fork, a site supervisor's children), stays in one cgroup of the rehearsal's own, as
 * a container's processes stay in its cgroup under Docker. Stopping the rehearsal ends them all from
 * there: SIGTERM to the containers first (as `docker stop`), then SIGKILL to whatever is left in the
 * cgroup after the grace period, until it is empty.
 *
 * A process joins by the wrapper `sh -c 'echo $$ > <cgroup>/cgroup.procs && exec "$@"'` put in front
 * of its command line, so it is in the cgroup before it runs anything (no fork can escape between
 * spawn and joining). Any hierarchy will do, since only membership is used: cgroup v2 (unified, at
 * /sys/fs/cgroup or /sys/fs/cgroup/unified) or v1's pids or freezer hierarchy.
 */
import { existsSync, mkdirSync, readFileSync, rmdirSync } from 'node:fs';
import { join } from 'node:path';

const HIERARCHIES = ['/sys/fs/cgroup/unified', '/sys/fs/cgroup/pids', '/sys/fs/cgroup/freezer', '/sys/fs/cgroup'];

export class RehearsalCgroup {
  private constructor(readonly dir: string) {}

  /** A fresh cgroup for this rehearsal, or the reason none can be made here (not root, no cgroupfs). */
  static create(name: string): RehearsalCgroup | string {
    if (process.getuid?.() !== 0) return 'not root';
    for (const root of HIERARCHIES) {
      if (!existsSync(join(root, 'cgroup.procs'))) continue;
      const dir = join(root, name);
      try {
        mkdirSync(dir);
        return new RehearsalCgroup(dir);
      } catch {
        // read-only or delegated elsewhere: try the next hierarchy
      }
    }
    return 'no writable cgroup hierarchy under /sys/fs/cgroup';
  }

  /** `argv` run as a member of this cgroup from its first instruction on. */
  wrap(argv: readonly string[]): string[] {
    return ['/bin/sh', '-c', 'echo $$ > "$0/cgroup.procs" && exec "$@"', this.dir, ...argv];
  }

  /** The processes in the cgroup now. */
  pids(): number[] {
    try {
      return readFileSync(join(this.dir, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean).map(Number);
    } catch {
      return [];
    }
  }

  /** SIGKILL everything in the cgroup until it is empty (a process forking meanwhile is caught next round); then remove it. */
  async killAll(timeoutMs = 10_000): Promise<number[]> {
    const deadline = Date.now() + timeoutMs;
    let left = this.pids();
    while (left.length > 0 && Date.now() < deadline) {
      for (const pid of left) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // gone already
        }
      }
      await new Promise((r) => setTimeout(r, 50));
      left = this.pids();
    }
    if (left.length === 0) {
      try {
        rmdirSync(this.dir);
      } catch {
        // emptied but still busy for a moment; the kernel frees it with its last task
      }
    }
    return left;
  }
}
