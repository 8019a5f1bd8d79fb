// The OSM API double moved to services/shared/testing/osm-api.ts, beside the other doubles the stack
// rehearsal runs (runtime code may not import test/); this path stays for the tests that import it here.
export * from '../../services/shared/testing/osm-api.js';
