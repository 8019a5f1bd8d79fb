-- 001: the webhook's shared state, so that several webhook processes on one database act as one
-- (docs/webhook.md "More than one replica"). Without WEBHOOK_DATABASE_URL the webhook keeps the
-- same record in its file journal (services/webhook/src/deployments/store.ts) instead.
--
-- deployments: the journal (services/webhook/src/deployments/types.ts has the glossary). A target's
--   lane is its row in state 'running' and its row in state 'queued': at most one of each, which the
--   two partial unique indexes make a rule of the database. `runner` is the replica running it.
--   `changed` orders by last change, as the file journal lists (newest change first).
-- deliveries: delivery ids seen, so a delivery acknowledged by one replica and replayed to another
--   deploys once.
-- replicas: one row per running webhook process with the end of its lease; a running deployment
--   whose runner has no row is an orphan (services/webhook/src/deployments/journal.ts).
-- auth_failures: the failed-authentication limit's fixed-window counters (one budget across
--   replicas), the shape of services/shared/rate-limit.ts.
CREATE SEQUENCE webhook.deployment_changes;

CREATE TABLE webhook.deployments (
  id text PRIMARY KEY CHECK (length(id) <= 64),
  target text NOT NULL CHECK (length(target) <= 200),
  branch text NOT NULL CHECK (length(branch) <= 255),
  commit_id text NOT NULL CHECK (commit_id ~ '^[0-9a-f]{40}([0-9a-f]{24})?$'),
  deployed_commit text CHECK (deployed_commit ~ '^[0-9a-f]{40}([0-9a-f]{24})?$'),
  release_name text CHECK (release_name ~ '^[0-9]{14}$'),
  provider text NOT NULL CHECK (provider IN ('github', 'gitlab')),
  delivery_id text CHECK (length(delivery_id) <= 128),
  state text NOT NULL CHECK (state IN ('queued', 'running', 'succeeded', 'failed', 'refused', 'timed-out', 'interrupted', 'superseded')),
  queued_at timestamptz NOT NULL,
  started_at timestamptz,
  finished_at timestamptz,
  duration_ms bigint,
  exit_code integer,
  log_path text CHECK (length(log_path) <= 4096),
  superseded_by text,
  runner uuid,
  changed bigint NOT NULL DEFAULT nextval('webhook.deployment_changes'),
  CHECK ((state = 'running') = (runner IS NOT NULL))
);

CREATE UNIQUE INDEX deployments_one_running ON webhook.deployments (target) WHERE state = 'running';
CREATE UNIQUE INDEX deployments_one_waiting ON webhook.deployments (target) WHERE state = 'queued';
CREATE INDEX deployments_changed ON webhook.deployments (changed);
CREATE INDEX deployments_target_changed ON webhook.deployments (target, changed);
CREATE INDEX deployments_target_commit ON webhook.deployments (target, commit_id, changed);
CREATE INDEX deployments_succeeded ON webhook.deployments (target, deployed_commit, changed) WHERE state = 'succeeded';

CREATE TABLE webhook.deliveries (
  id text PRIMARY KEY CHECK (length(id) <= 128),
  deployment_id text NOT NULL,
  at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX deliveries_at ON webhook.deliveries (at);

CREATE TABLE webhook.replicas (
  id uuid PRIMARY KEY,
  host text NOT NULL,
  pid integer NOT NULL,
  started_at timestamptz NOT NULL DEFAULT now(),
  lease_ends timestamptz NOT NULL
);

CREATE TABLE webhook.auth_failures (
  key text PRIMARY KEY,
  hits integer NOT NULL,
  window_ends timestamptz NOT NULL
);

CREATE INDEX auth_failures_window_ends ON webhook.auth_failures (window_ends);

COMMENT ON TABLE webhook.deployments IS 'The webhook''s deployment journal and deploy queue, shared by every webhook replica.';
COMMENT ON TABLE webhook.deliveries IS 'Delivery ids the webhook has seen: a replayed delivery deploys once, whichever replica it reaches.';
COMMENT ON TABLE webhook.replicas IS 'Running webhook processes and their leases.';
COMMENT ON TABLE webhook.auth_failures IS 'The webhook''s failed-authentication counters, one budget across replicas.';
