/**
 * The conformance classes /ogcapi declares (GET /ogcapi/conformance). Only what is implemented and
 * tested: services/api/test/ogcapi-conformance.test.ts walks each class's applicable requirements and
 * names their OGC identifiers. Part 4 is an OGC draft (1.0.0-draft.1); its URIs are the draft's.
 */
export const CONFORMANCE = {
  core: 'http://www.opengis.net/spec/ogcapi-features-1/1.0/conf/core',
  oas30: 'http://www.opengis.net/spec/ogcapi-features-1/1.0/conf/oas30',
  html: 'http://www.opengis.net/spec/ogcapi-features-1/1.0/conf/html',
  geojson: 'http://www.opengis.net/spec/ogcapi-features-1/1.0/conf/geojson',
  crs: 'http://www.opengis.net/spec/ogcapi-features-2/1.0/conf/crs',
  queryables: 'http://www.opengis.net/spec/ogcapi-features-3/1.0/conf/queryables',
  queryablesQueryParameters: 'http://www.opengis.net/spec/ogcapi-features-3/1.0/conf/queryables-query-parameters',
  filter: 'http://www.opengis.net/spec/ogcapi-features-3/1.0/conf/filter',
  featuresFilter: 'http://www.opengis.net/spec/ogcapi-features-3/1.0/conf/features-filter',
  cql2Text: 'http://www.opengis.net/spec/cql2/1.0/conf/cql2-text',
  cql2Json: 'http://www.opengis.net/spec/cql2/1.0/conf/cql2-json',
  basicCql2: 'http://www.opengis.net/spec/cql2/1.0/conf/basic-cql2',
  advancedComparison: 'http://www.opengis.net/spec/cql2/1.0/conf/advanced-comparison-operators',
  caseInsensitive: 'http://www.opengis.net/spec/cql2/1.0/conf/case-insensitive-comparison',
  basicSpatial: 'http://www.opengis.net/spec/cql2/1.0/conf/basic-spatial-functions',
  basicSpatialPlus: 'http://www.opengis.net/spec/cql2/1.0/conf/basic-spatial-functions-plus',
  createReplaceDelete: 'http://www.opengis.net/spec/ogcapi-features-4/1.0/conf/create-replace-delete',
  update: 'http://www.opengis.net/spec/ogcapi-features-4/1.0/conf/update',
  features4: 'http://www.opengis.net/spec/ogcapi-features-4/1.0/conf/features',
  optimisticLocking: 'http://www.opengis.net/spec/ogcapi-features-4/1.0/conf/optimistic-locking-etags',
} as const;

export const CONFORMS_TO: readonly string[] = Object.values(CONFORMANCE);
