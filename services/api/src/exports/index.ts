/**
 * The QC side effects as libraries, for the job handlers of phase 2:
 *
 *   approve → OsmExporter.export, WikibaseExporter.export, AgencyNotifier.notify(computeAgencyChangeset(…))
 *   submit  → ReviewerNotifier.notify (services/api/src/notifications)
 *
 * Each returns a terminal outcome to record, or throws RetryableExportError for the queue to retry.
 * See docs/qc.md.
 */
export type { CategoryMapping, CategoryRule, ExportOutcome, ExportStatus, FeatureGeometry, FeatureSnapshot } from './types.js';
export { SEED_CATEGORY_MAPPING, CategoryMappingSchema, managedOsmKeys } from './category-mapping.js';
export { exportsEnvShape, checkExportsEnv, ExportsEnvSchema, exportsSettingsFrom, type ExportsEnv, type ExportsSettings } from './config.js';
export { RetryableExportError } from './errors.js';
export { createMemoryJournal, type ExportJournal, type OsmExportJournal, type WikibaseExportJournal } from './journal.js';
export { OsmExporter, type OsmExportRecord, type OsmExportRequest } from './osm/exporter.js';
export { WikibaseExporter, type WikibaseExportRecord, type WikibaseExportRequest } from './wikibase/exporter.js';
export { computeAgencyChangeset, type AgencyChangeset } from './agency/changeset.js';
export { AgencyNotifier } from './agency/notifier.js';
export { verifyAgencySignature, signAgencyPayload, SIGNATURE_HEADER, TIMESTAMP_HEADER, DELIVERY_HEADER } from './agency/signature.js';
