-- 006: each feature's GeoJSON kept ready on its row, in RFC 7946 form.
--
-- Why: building JSON (json_build_object, ST_AsGeoJSON) was most of the cost of a list. Now it is
-- done once per write, and a list only concatenates stored text.
--
-- Invariants, for every writer (the API, GeoServer WFS-T, psql):
-- - features.features.geojson = features.as_geojson(row) after every INSERT and UPDATE. A BEFORE
--   trigger that fires after the other BEFORE triggers (names fire in order; "zz_" sorts last) sets
--   it from the final row, so version, status and updated_* are already the new ones. A writer
--   cannot set the column to anything else: the trigger overwrites it.
-- - The text is a GeoJSON Feature: polygon rings in RFC 7946 §3.1.6 winding order (exterior
--   counter-clockwise, holes clockwise), coordinates with at most 9 decimals (the API stores them
--   rounded to 9 decimals, so what it serves is what it stores), times in UTC.
-- - It depends on nothing but the row (no session TimeZone), so it never goes stale.
-- - History snapshots and QC snapshots leave the column out: they keep the row's data, not a rendering.

ALTER TABLE features.features ADD COLUMN geojson text;

-- ISO 8601 in UTC with microseconds, whatever the session's TimeZone.
CREATE FUNCTION features.iso_utc(t timestamptz) RETURNS text
  LANGUAGE sql STABLE STRICT
  AS $$ SELECT to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') $$;

-- RFC 7946 winding for polygons. Only for polygons: PostGIS 3.3's ST_ForcePolygonCCW reverses a
-- LineString, which would turn a line around.
CREATE FUNCTION features.rfc7946_winding(g geometry) RETURNS geometry
  LANGUAGE sql IMMUTABLE STRICT
  AS $$ SELECT CASE WHEN ST_GeometryType(g) IN ('ST_Polygon', 'ST_MultiPolygon') THEN ST_ForcePolygonCCW(g) ELSE g END $$;

-- The geometry as served: RFC 7946 winding, at most 9 decimals (about 0.1 mm).
CREATE FUNCTION features.geometry_geojson(g geometry) RETURNS text
  LANGUAGE sql IMMUTABLE STRICT
  AS $$ SELECT ST_AsGeoJSON(features.rfc7946_winding(g), 9) $$;

CREATE FUNCTION features.as_geojson(f features.features) RETURNS text
  LANGUAGE sql STABLE
  AS $$
    SELECT json_build_object(
      'type', 'Feature',
      'id', f.id,
      'geometry', features.geometry_geojson(f.geom)::json,
      'properties', json_strip_nulls(json_build_object(
        'name', f.name, 'kategorie', f.kategorie, 'adresse', f.adresse, 'telefon', f.telefon,
        'status', f.status, 'version', f.version,
        'createdBy', f.created_by, 'createdAt', features.iso_utc(f.created_at),
        'updatedBy', f.updated_by, 'updatedAt', features.iso_utc(f.updated_at))))::text
  $$;

CREATE FUNCTION features.keep_geojson() RETURNS trigger
  LANGUAGE plpgsql
  AS $$
BEGIN
  NEW.geojson := features.as_geojson(NEW);
  RETURN NEW;
END
$$;

-- Existing rows: filled with the other triggers off, so filling in a rendering is no new version.
ALTER TABLE features.features DISABLE TRIGGER USER;
UPDATE features.features f SET geojson = features.as_geojson(f);
ALTER TABLE features.features ENABLE TRIGGER USER;

ALTER TABLE features.features ALTER COLUMN geojson SET NOT NULL;

CREATE TRIGGER zz_features_keep_geojson
  BEFORE INSERT OR UPDATE ON features.features
  FOR EACH ROW EXECUTE FUNCTION features.keep_geojson();

-- The history snapshot as before (004), without the rendering.
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
    (to_jsonb(row_state) - 'geom' - 'geojson') || jsonb_build_object('geometry', ST_AsGeoJSON(row_state.geom)::jsonb)
  );
  RETURN NULL;
END
$$;
