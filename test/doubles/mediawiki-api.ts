// The MediaWiki/Wikibase double moved to services/shared/testing/mediawiki-api.ts, beside the other
// doubles the stack rehearsal runs (runtime code may not import test/); this path stays for the tests that import it here.
export * from '../../services/shared/testing/mediawiki-api.js';
