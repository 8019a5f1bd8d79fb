import type { RehearsalStack } from './runner.js';

export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

export interface StepResult {
  step: string;
  ok: boolean;
  detail?: string;
  ms: number;
}

export async function runSteps(_stack: RehearsalStack, _options: { say(line: string): void }): Promise<StepResult[]> {
  return [];
}
