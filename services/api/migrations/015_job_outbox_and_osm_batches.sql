-- 015: side effects relayed from an outbox, and OSM exports in batches (one changeset for nearby approvals).
--
-- Outbox. A transition writes its qc.jobs rows and nothing else of the queue: no graphile_worker
-- call, so no task/queue upsert and no NOTIFY (which serialises commits) in the approval's
-- transaction. The rows ARE the outbox: relayed_at IS NULL marks a job whose graphile job does not
-- exist yet. The QC worker's relay (qc/jobs/relay.ts) claims such rows with FOR UPDATE SKIP LOCKED,
-- sets relayed_at and adds their graphile jobs with one add_jobs call, in one transaction: a job is
-- relayed exactly once, and a rolled-back transition leaves no row to relay. max_attempts is the
-- graphile max_attempts the transition asked for.
--
-- Batches. An OSM export job claims other ready OSM exports near its own feature (qc/jobs/osm-batch.ts)
-- and uploads them all in one changeset. qc.osm_batches is that claim; qc.jobs.batch_id says which
-- batch a job belongs to, and journal_plan holds the job's part of the osmChange, written in the same
-- statement as journal_changeset_id and before the upload, so a re-run after a crash can find the
-- job's elements in the changeset's download instead of uploading them again.

ALTER TABLE qc.jobs
  ADD COLUMN relayed_at timestamptz,
  ADD COLUMN max_attempts smallint,
  ADD COLUMN batch_id bigint,
  ADD COLUMN journal_plan jsonb;

-- Jobs queued before this migration already have their graphile jobs.
UPDATE qc.jobs SET relayed_at = created_at;

CREATE INDEX jobs_unrelayed_idx ON qc.jobs (id) WHERE relayed_at IS NULL;

CREATE TABLE qc.osm_batches (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  -- The job whose graphile job claimed the others.
  leader_job_id bigint NOT NULL REFERENCES qc.jobs (id),
  job_ids bigint[] NOT NULL,
  process_id text,
  -- The changeset opened for the batch (also journaled on each job), null before it is opened.
  changeset_id bigint,
  created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
  finished_at timestamptz
);

ALTER TABLE qc.jobs ADD CONSTRAINT jobs_batch_fk FOREIGN KEY (batch_id) REFERENCES qc.osm_batches (id);
CREATE INDEX jobs_batch_idx ON qc.jobs (batch_id) WHERE batch_id IS NOT NULL;

COMMENT ON TABLE qc.osm_batches IS 'OSM exports uploaded together in one changeset (nearby approvals), claimed by one export job.';
