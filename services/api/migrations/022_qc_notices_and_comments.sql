-- 022: notices to contributors about decisions on their submissions, and a comment thread per QC item.
--
-- Why: a contributor learned of an approval or a rejection only by visiting /qc/mine, and a reviewer
-- and a contributor had no place to talk about a submission but the one submit comment and the one
-- rejection reason.
--
-- qc.notices: one row per approve or reject of a feature whose latest submission was someone else's,
-- written in the decision's transaction (qc/service.ts), so a decision and its notice commit together.
-- The submitter reads them in the app (GET /api/qc/notices, /qc/mine); the QC worker mails them
-- (notifications/contributor-notice.ts), taking pending rows with FOR UPDATE SKIP LOCKED, and records
-- how it went in mail_status: sent, skipped (no SMTP, no address) or failed (the server refused).
CREATE TABLE qc.notices (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  recipient text NOT NULL,
  feature_id text NOT NULL,
  feature_name text NOT NULL,
  transition_id bigint NOT NULL REFERENCES qc.transitions (id) ON DELETE CASCADE,
  action text NOT NULL CHECK (action IN ('approve', 'reject')),
  -- The rejection reason or the approval comment.
  reason text,
  actor text NOT NULL,
  actor_name text,
  created_at timestamptz NOT NULL DEFAULT now(),
  read_at timestamptz,
  mail_status text NOT NULL DEFAULT 'pending' CHECK (mail_status IN ('pending', 'sent', 'skipped', 'failed')),
  mail_detail text
);
CREATE INDEX notices_recipient_idx ON qc.notices (recipient, id DESC);
CREATE INDEX notices_mail_pending_idx ON qc.notices (id) WHERE mail_status = 'pending';

-- qc.comments: the thread of a feature's review, oldest first; kept when the feature is deleted (the
-- transitions are too).
CREATE TABLE qc.comments (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  feature_id text NOT NULL,
  author text NOT NULL,
  author_name text,
  body text NOT NULL CHECK (char_length(body) BETWEEN 1 AND 2000),
  created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX comments_feature_idx ON qc.comments (feature_id, id);
