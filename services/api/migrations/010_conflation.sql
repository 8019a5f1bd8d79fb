-- 010: conflation before the first export, and the decisions it leads to.
--
-- Before a feature's first OSM or Wikibase export, the export job looks for existing objects that
-- may be the same (docs/qc.md, "Conflation"). Its decision is a row here, written BEFORE anything is
-- written remotely, so a re-run after a crash uses the same decision instead of looking again:
--   create          nothing matched: a new element / item is created
--   link            one strong candidate (automatic) or a reviewer's pick: merge into it
--   needs_decision  several candidates or a weak one: the job stops with status needs_decision
--                   until a reviewer decides (a second row, decided_by set, for the same job)
-- Rows are never updated or deleted: together they are the feature's conflation history, shown on
-- GET /api/features/{id}/reviews.

ALTER TABLE qc.jobs DROP CONSTRAINT jobs_status_check;
ALTER TABLE qc.jobs ADD CONSTRAINT jobs_status_check CHECK (status IN (
  'queued', 'running', 'retrying', 'needs_decision',
  'exported', 'unchanged', 'sent', 'conflict', 'failed', 'skipped', 'not_applicable'));

CREATE TABLE qc.conflation_decisions (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  feature_id text NOT NULL,
  job_id bigint NOT NULL REFERENCES qc.jobs (id),
  target text NOT NULL CHECK (target IN ('osm', 'wikibase')),
  outcome text NOT NULL CHECK (outcome IN ('create', 'link', 'needs_decision')),
  -- link: the chosen element ("way/123") or item ("Q42").
  chosen text CHECK ((outcome = 'link') = (chosen IS NOT NULL)),
  -- A reviewer may let the export move a linked OSM element onto the feature's geometry.
  move_geometry boolean NOT NULL DEFAULT false,
  reason text NOT NULL,
  -- The candidates as scored when the lookup ran (for the review map and the audit trail).
  candidates jsonb NOT NULL DEFAULT '[]'::jsonb CHECK (jsonb_typeof(candidates) = 'array'),
  -- The decision as the exporter reads it back.
  decision jsonb NOT NULL,
  -- NULL: automatic. Otherwise the reviewer who decided.
  decided_by text,
  decided_by_name text,
  created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE INDEX conflation_decisions_job_idx ON qc.conflation_decisions (job_id, id);
CREATE INDEX conflation_decisions_feature_idx ON qc.conflation_decisions (feature_id, id);

-- The OSM edit rate (OSM_MAX_EDITS_PER_HOUR) counts recent exports.
CREATE INDEX jobs_recent_osm_exports_idx ON qc.jobs (finished_at) WHERE task = 'osm_export' AND status = 'exported';

COMMENT ON TABLE qc.conflation_decisions IS 'Conflation decisions of OSM and Wikibase exports: automatic or by a reviewer, never updated.';
