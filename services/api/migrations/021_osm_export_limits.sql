-- 021: OSM's limits for the export jobs (issue 27, docs/qc.md "OSM's limits").
--
-- not_before: a job given back after a transient failure (a 429 with Retry-After, a 503) is not
--   claimed again, by its own run or into another export's batch, before this time. Before, the rows
--   of a batch went straight back to the queue and were claimed again at once, each claim counting
--   an attempt: twelve attempts were used up 17 s after the first 429.
-- osm_changes: how many elements (created, modified, deleted) an OSM export's upload changed; the
--   hourly budget OSM_MAX_EDITS_PER_HOUR counts these, not features.
ALTER TABLE qc.jobs ADD COLUMN IF NOT EXISTS not_before timestamptz;
ALTER TABLE qc.jobs ADD COLUMN IF NOT EXISTS osm_changes integer CHECK (osm_changes IS NULL OR osm_changes >= 0);
