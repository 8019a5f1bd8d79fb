import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const fixture = fileURLToPath(new URL('./fixtures/early-signal.ts', import.meta.url));

/** Runs the fixture, sends SIGTERM `signals` times once it is busy; its exit code and output. */
async function run(signals: number): Promise<{ code: number | null; signal: string | null; output: string }> {
  const child = spawn(process.execPath, ['--import', 'tsx', fixture], { stdio: ['ignore', 'pipe', 'inherit'] });
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => {
    const first = !output.includes('busy');
    output += chunk.toString();
    if (first && output.includes('busy')) for (let i = 0; i < signals; i++) setTimeout(() => child.kill('SIGTERM'), 100 + i * 1_400);
  });
  // A lost signal leaves it running: ended here, so that the test fails instead of waiting.
  const deadline = setTimeout(() => child.kill('SIGKILL'), 10_000);
  const [code, signal] = (await once(child, 'exit')) as [number | null, string | null];
  clearTimeout(deadline);
  return { code, signal, output };
}

describe('stopOnSignals', () => {
  it('stops on a signal that arrived while the early listener was still the only one', async () => {
    const { code, signal, output } = await run(1);
    expect({ code, signal }).toEqual({ code: 0, signal: null });
    expect(output).toContain('"msg":"shutting down"');
    expect(output).toContain('closed');
  }, 30_000);

  it('ignores a second signal while closing instead of dying of it', async () => {
    // The second SIGTERM comes 1.5 s after the fixture got busy: the first one's close (a second)
    // starts once the busy second is over, so the second signal arrives during the close.
    const { code, signal, output } = await run(2);
    expect({ code, signal }).toEqual({ code: 0, signal: null });
    expect(output.match(/"msg":"shutting down"/g)).toHaveLength(1);
    expect(output).toContain('closed');
  }, 30_000);
});
