-- 001: the schema groups, the features table and its version history.
--
-- Invariants kept by triggers, so they hold for every writer (the API, GeoServer WFS-T, psql):
-- - version is 1 on insert and grows by exactly 1 on every update; updated_at/updated_by follow.
-- - every insert, update and delete leaves one row in history.feature_versions with the full row
--   (geometry as GeoJSON) and the actor: the transaction-local setting app.actor when the writer set
--   it (the API does, per transaction), otherwise the database user.
-- - history rows are not tied to the feature by a foreign key: deleting a feature keeps its history.

CREATE EXTENSION IF NOT EXISTS postgis;

CREATE SCHEMA IF NOT EXISTS features;
CREATE SCHEMA IF NOT EXISTS metadata;
CREATE SCHEMA IF NOT EXISTS history;
CREATE SCHEMA IF NOT EXISTS qc;
CREATE SCHEMA IF NOT EXISTS users;

CREATE TABLE features.features (
  id text PRIMARY KEY DEFAULT gen_random_uuid()::text,
  name text NOT NULL CHECK (char_length(name) BETWEEN 1 AND 255),
  kategorie text NOT NULL CHECK (kategorie IN ('friedhof', 'blumenbeet', 'denkmal')),
  adresse text,
  telefon text,
  geom geometry(Geometry, 4326) NOT NULL,
  version integer NOT NULL DEFAULT 1,
  status text NOT NULL DEFAULT 'draft',
  created_by text,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_by text,
  updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX features_geom_idx ON features.features USING gist (geom);
CREATE INDEX features_kategorie_id_idx ON features.features (kategorie, id);

COMMENT ON TABLE features.features IS 'Mapped features (EPSG:4326). Written by the API and by GeoServer WFS-T; history is kept by triggers.';

-- Who is writing: the API sets app.actor per transaction (set_config(..., true)); other writers are
-- recorded as their database user. An unset custom setting reads as NULL or '' depending on whether
-- it was ever set in the session, hence nullif.
CREATE FUNCTION features.current_actor() RETURNS text
  LANGUAGE sql STABLE
  AS $$ SELECT coalesce(nullif(current_setting('app.actor', true), ''), session_user::text) $$;

CREATE FUNCTION features.stamp_version() RETURNS trigger
  LANGUAGE plpgsql
  AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    NEW.version := 1;
    NEW.created_at := now();
    NEW.created_by := coalesce(NEW.created_by, features.current_actor());
    NEW.updated_at := NEW.created_at;
    NEW.updated_by := NEW.created_by;
  ELSE
    -- The identity of a feature and its creation are not editable, whoever writes.
    NEW.id := OLD.id;
    NEW.created_at := OLD.created_at;
    NEW.created_by := OLD.created_by;
    NEW.version := OLD.version + 1;
    NEW.updated_at := now();
    NEW.updated_by := features.current_actor();
  END IF;
  RETURN NEW;
END
$$;

CREATE TRIGGER features_stamp_version
  BEFORE INSERT OR UPDATE ON features.features
  FOR EACH ROW EXECUTE FUNCTION features.stamp_version();

CREATE TABLE history.feature_versions (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  feature_id text NOT NULL,
  version integer NOT NULL,
  operation text NOT NULL CHECK (operation IN ('insert', 'update', 'delete')),
  actor text NOT NULL,
  recorded_at timestamptz NOT NULL DEFAULT clock_timestamp(),
  snapshot jsonb NOT NULL
);

CREATE INDEX feature_versions_feature_idx ON history.feature_versions (feature_id, id DESC);

COMMENT ON COLUMN history.feature_versions.snapshot IS 'The whole row as JSON, geom replaced by its GeoJSON geometry.';

CREATE FUNCTION history.record_feature_version() RETURNS trigger
  LANGUAGE plpgsql
  AS $$
DECLARE
  row_state features.features;
BEGIN
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

CREATE TRIGGER features_record_history
  AFTER INSERT OR UPDATE OR DELETE ON features.features
  FOR EACH ROW EXECUTE FUNCTION history.record_feature_version();
