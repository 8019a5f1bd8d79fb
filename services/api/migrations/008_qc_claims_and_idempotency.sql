-- 008: review claims on QC items, and the Idempotency-Key record of POST /api/features.
--
-- Claims (docs/qc.md "Claims"): a reviewer holds a feature in_qc for a limited time so two reviewers
-- do not review it at once. Invariants:
-- - at most one claim per feature (primary key); taking it over needs the old one to have expired,
--   which INSERT … ON CONFLICT DO UPDATE … WHERE checks atomically, so concurrent claims find
--   exactly one holder.
-- - a claim lives only while its feature is in_qc: a decision, an edit (reopen) or a deletion ends
--   it here, whoever writes (the API, GeoServer WFS-T, psql).
CREATE TABLE qc.claims (
  feature_id text PRIMARY KEY,
  holder text NOT NULL CHECK (char_length(holder) BETWEEN 1 AND 255),
  holder_name text CHECK (holder_name IS NULL OR char_length(holder_name) <= 255),
  claimed_at timestamptz NOT NULL DEFAULT now(),
  expires_at timestamptz NOT NULL
);

COMMENT ON TABLE qc.claims IS 'Who is reviewing a feature in_qc, until when. Expired rows are taken over by the next claim.';

CREATE FUNCTION qc.end_claim() RETURNS trigger
  LANGUAGE plpgsql
  AS $$
BEGIN
  DELETE FROM qc.claims WHERE feature_id = OLD.id;
  RETURN NULL;
END
$$;

-- Not "UPDATE OF status": an edit changes the status in a BEFORE trigger (reopen), which such a
-- trigger would not see.
CREATE TRIGGER features_end_claim_on_leaving_qc
  AFTER UPDATE ON features.features
  FOR EACH ROW WHEN (OLD.status = 'in_qc' AND NEW.status <> 'in_qc')
  EXECUTE FUNCTION qc.end_claim();

CREATE TRIGGER features_end_claim_on_delete
  AFTER DELETE ON features.features
  FOR EACH ROW EXECUTE FUNCTION qc.end_claim();

-- Idempotency keys (docs/api.md "Idempotency-Key"): per caller and key, the hash of the request and,
-- once the request has succeeded, the answer to replay. A row is pending (response_status NULL)
-- while its request runs. Rows are kept until expires_at (at least 24 h after creation).
CREATE SCHEMA IF NOT EXISTS http;

CREATE TABLE http.idempotency_keys (
  id bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
  caller text NOT NULL CHECK (char_length(caller) BETWEEN 1 AND 255),
  key text NOT NULL CHECK (char_length(key) BETWEEN 1 AND 255),
  -- The method and path the key was first used on, and the SHA-256 of the canonical request body.
  request_target text NOT NULL,
  request_hash text NOT NULL,
  response_status integer,
  response_headers jsonb,
  response_body text,
  created_at timestamptz NOT NULL DEFAULT now(),
  -- Refreshed by the request holding a pending row; a pending row whose lease ran out was left by a
  -- crashed request and may be taken over.
  locked_until timestamptz NOT NULL,
  expires_at timestamptz NOT NULL,
  PRIMARY KEY (caller, key)
);

CREATE INDEX idempotency_keys_expires_idx ON http.idempotency_keys (expires_at);

COMMENT ON TABLE http.idempotency_keys IS 'Idempotency-Key of POST /api/features: the request hash and the answer to replay, per caller.';
