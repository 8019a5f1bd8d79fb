-- 030: the outbox as a table of its own (issue 29; docs/qc.md "Jobs", docs/api.md "An approval with its jobs").
--
-- Until now the qc.jobs rows were the outbox (migration 015): relayed_at IS NULL marked a job whose
-- graphile job did not exist yet, found through jobs_unrelayed_idx, and the relay marked each row
-- relayed. That mark was a new version of every job row with an entry in each of its three indexes,
-- and the claim before it a row lock: with the jobs_unrelayed_idx entry of the insert, 12 of the 50
-- index entries an approval wrote (pg_waldump), and 9.5 KB of WAL per approval against 8.2 KB now.
--
-- Now what queues jobs (a transition, a re-run, a row given back, a link-back export) adds ONE
-- qc.job_outbox row naming them, in the same statement; the relay deletes the rows it takes (FOR
-- UPDATE SKIP LOCKED, so each is taken exactly once) and adds their graphile jobs in the same
-- statement, as before. The job rows themselves are not touched by the relay.
--
-- relayed_at stays: from this release on it is set when a job enters qc.job_outbox (so its row is
-- not in jobs_unrelayed_idx and costs that index nothing). A row with relayed_at NULL was queued by
-- a release before this one, still running beside it while an upgrade rolls: the relay takes those
-- too, through jobs_unrelayed_idx, and marks them as it did. Once no release before 030 runs, that
-- path only ever finds the index empty.
CREATE TABLE qc.job_outbox (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  job_ids bigint[] NOT NULL CHECK (cardinality(job_ids) > 0)
);

COMMENT ON TABLE qc.job_outbox IS 'Jobs waiting for the relay to add their graphile jobs (qc/jobs/relay.ts); each row is taken and deleted once.';
