-- 005: the side effects of QC transitions, their outcomes and the export records.
--
-- A qc.jobs row is written in the same transaction as the transition, together with the
-- graphile-worker job that runs it (graphile_worker.add_job with payload {"jobId": id}); the row is
-- what admins see and re-run, graphile's job is only the scheduling. Outcomes are terminal
-- (exported, unchanged, sent, conflict, failed, skipped, not_applicable); queued/running/retrying
-- are the states on the way.
--
-- Crash safety: journal_changeset_id (OSM) and journal_intent (Wikibase) are the write-ahead notes of
-- the exporters, committed in their own transaction before the remote call; a re-run after a crash
-- reads them to recover the remote result instead of creating it twice.

CREATE TABLE qc.jobs (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  transition_id bigint NOT NULL REFERENCES qc.transitions (id),
  feature_id text NOT NULL,
  version integer NOT NULL,
  task text NOT NULL CHECK (task IN ('reviewer_notice', 'osm_export', 'wikibase_export', 'agency_notice')),
  status text NOT NULL DEFAULT 'queued' CHECK (status IN (
    'queued', 'running', 'retrying',
    'exported', 'unchanged', 'sent', 'conflict', 'failed', 'skipped', 'not_applicable')),
  reason text,
  result jsonb,
  attempts integer NOT NULL DEFAULT 0,
  last_error text,
  journal_changeset_id bigint,
  journal_intent text,
  -- Who runs it now: the worker process (qc.worker_processes) and graphile's lock owner.
  process_id text,
  graphile_worker_id text,
  reruns integer NOT NULL DEFAULT 0,
  rerun_by text,
  created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
  updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
  finished_at timestamptz
);

CREATE INDEX jobs_feature_idx ON qc.jobs (feature_id, id);
CREATE INDEX jobs_status_idx ON qc.jobs (status, id);

-- What the last successful export left on the remote side, per feature and target: the OSM root
-- element (type, id, version) or the Wikibase item. A re-approval modifies these instead of
-- creating new ones.
CREATE TABLE qc.export_records (
  feature_id text NOT NULL,
  target text NOT NULL CHECK (target IN ('osm', 'wikibase')),
  record jsonb NOT NULL,
  job_id bigint NOT NULL REFERENCES qc.jobs (id),
  updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
  PRIMARY KEY (feature_id, target)
);

-- Live worker processes. A job left 'running' by a process whose heartbeat stopped (killed) is
-- handed back to the queue by the surviving workers.
CREATE TABLE qc.worker_processes (
  id text PRIMARY KEY,
  started_at timestamptz NOT NULL DEFAULT now(),
  heartbeat_at timestamptz NOT NULL DEFAULT now()
);
