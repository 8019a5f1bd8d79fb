// TestClock moved to services/shared/testing/ory/clock.ts with the Ory doubles the stack rehearsal runs;
// this path stays only for bench/auth.bench.ts until it imports the new one.
export { TestClock } from '../../../services/shared/testing/ory/clock.js';
