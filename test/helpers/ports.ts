// freePort moved to services/shared/testing/ports.ts (the stack rehearsal needs it at run time, and runtime
// code never imports test/); this path stays for the tests and benchmarks that still import it from here.
export { freePort } from '../../services/shared/testing/ports.js';
