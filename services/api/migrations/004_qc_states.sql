-- 004: the QC states of a feature and the record of every transition.
--
-- States (features.features.status): draft -> in_qc (submit) -> approved | rejected (decide).
-- Invariants kept here, for every writer (the API, GeoServer WFS-T, psql):
-- - status is one of the four states.
-- - a change of the feature's data (name, kategorie, adresse, telefon, geom) puts it back to draft,
--   whatever its state was, and records that as a 'reopen' transition. The trigger blocks nothing:
--   the API itself refuses edits while in_qc (409); other writers are not stopped, but the state is
--   never stale (an approval always concerns the data it was given for).
-- - a change of the status alone is not a new version of the feature: version, updated_* and the
--   history stay as they are, so a transition concerns exactly the version that was submitted.

ALTER TABLE features.features
  ADD CONSTRAINT features_status_check CHECK (status IN ('draft', 'in_qc', 'approved', 'rejected'));

CREATE INDEX features_in_qc_idx ON features.features (id) WHERE status = 'in_qc';

CREATE TABLE qc.transitions (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  feature_id text NOT NULL,
  action text NOT NULL CHECK (action IN ('submit', 'approve', 'reject', 'reopen')),
  from_status text NOT NULL,
  to_status text NOT NULL,
  -- The feature version the transition concerns (for reopen: the new version that caused it).
  version integer NOT NULL,
  actor text NOT NULL,
  actor_name text,
  -- The submitter's or approver's comment, or the rejection reason.
  comment text CHECK (comment IS NULL OR char_length(comment) <= 4000),
  -- submit and approve: the feature as it was, the way history.feature_versions stores it.
  snapshot jsonb,
  created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE INDEX transitions_feature_idx ON qc.transitions (feature_id, id);

COMMENT ON TABLE qc.transitions IS 'Every QC state change: who, when, comment or reason, and the feature version it concerns.';

-- True when the feature's data differs; status and the bookkeeping columns do not count.
CREATE FUNCTION features.data_changed(old_row features.features, new_row features.features) RETURNS boolean
  LANGUAGE sql IMMUTABLE
  AS $$
    SELECT old_row.name IS DISTINCT FROM new_row.name
        OR old_row.kategorie IS DISTINCT FROM new_row.kategorie
        OR old_row.adresse IS DISTINCT FROM new_row.adresse
        OR old_row.telefon IS DISTINCT FROM new_row.telefon
        OR ST_AsEWKB(old_row.geom) IS DISTINCT FROM ST_AsEWKB(new_row.geom)
  $$;

-- A status-only change (a QC transition) is no new version.
CREATE FUNCTION features.is_status_only_change(old_row features.features, new_row features.features) RETURNS boolean
  LANGUAGE sql IMMUTABLE
  AS $$ SELECT old_row.status IS DISTINCT FROM new_row.status AND NOT features.data_changed(old_row, new_row) $$;

CREATE OR REPLACE FUNCTION features.stamp_version() RETURNS trigger
  LANGUAGE plpgsql
  AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    NEW.version := 1;
    NEW.status := 'draft';
    NEW.created_at := now();
    NEW.created_by := coalesce(NEW.created_by, features.current_actor());
    NEW.updated_at := NEW.created_at;
    NEW.updated_by := NEW.created_by;
  ELSE
    NEW.id := OLD.id;
    NEW.created_at := OLD.created_at;
    NEW.created_by := OLD.created_by;
    IF features.is_status_only_change(OLD, NEW) THEN
      NEW.version := OLD.version;
      NEW.updated_at := OLD.updated_at;
      NEW.updated_by := OLD.updated_by;
    ELSE
      NEW.version := OLD.version + 1;
      NEW.updated_at := now();
      NEW.updated_by := features.current_actor();
    END IF;
  END IF;
  RETURN NEW;
END
$$;

CREATE OR REPLACE FUNCTION history.record_feature_version() RETURNS trigger
  LANGUAGE plpgsql
  AS $$
DECLARE
  row_state features.features;
BEGIN
  IF TG_OP = 'UPDATE' AND features.is_status_only_change(OLD, NEW) THEN
    RETURN NULL; -- recorded in qc.transitions instead
  END IF;
  row_state := CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
  INSERT INTO history.feature_versions (feature_id, version, operation, actor, snapshot)
  VALUES (
    row_state.id,
    row_state.version,
    lower(TG_OP),
    features.current_actor(),
    (to_jsonb(row_state) - 'geom') || jsonb_build_object('geometry', ST_AsGeoJSON(row_state.geom)::jsonb)
  );
  RETURN NULL;
END
$$;

-- Runs after features_stamp_version (triggers fire in name order), so NEW.version is the new one.
CREATE FUNCTION qc.reopen_on_edit() RETURNS trigger
  LANGUAGE plpgsql
  AS $$
BEGIN
  IF features.data_changed(OLD, NEW) THEN
    IF OLD.status <> 'draft' THEN
      INSERT INTO qc.transitions (feature_id, action, from_status, to_status, version, actor, comment)
      VALUES (NEW.id, 'reopen', OLD.status, 'draft', NEW.version, features.current_actor(), 'edited');
    END IF;
    NEW.status := 'draft';
  END IF;
  RETURN NEW;
END
$$;

CREATE TRIGGER features_status_follows_edit
  BEFORE UPDATE ON features.features
  FOR EACH ROW EXECUTE FUNCTION qc.reopen_on_edit();
