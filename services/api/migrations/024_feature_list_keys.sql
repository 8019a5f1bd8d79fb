-- 024: what a bbox page of the list is chosen by, kept apart from the features' rows:
-- features.list_keys holds each feature's id, kategorie and bounding box, and its primary key index
-- carries all three, so a page in id order is found from the index alone (an index-only scan).
--
-- Why: a page of the list (GET /api/features?bbox=…, /ogcapi/…/items?bbox=…) is in id order, so the
-- database either walked the features in id order, reading each row (its geometry and stored GeoJSON,
-- about 1 KB) to test it against the box, or found every feature in the box by the GiST index, read
-- each of them and sorted them all. Either way it read many more rows than the page, and more the more
-- data there is: the same 1 000-row district page read 8 900 rows at 1M features, a page in a smaller
-- box 11 000 (services/api/src/features/queries.ts and docs/api.md "The list at a million features"
-- have the plans). PostGIS' GiST index cannot answer an index-only scan, and the features' rows are
-- wide; this index answers "the next ids in the box" at about 70 entries per 8 KB page, and only the
-- page's own rows are then read.
--
-- Invariants, for every writer (the API, GeoServer WFS-T, psql, imports):
-- - features.list_keys holds exactly one row per feature, with the same id and kategorie and
--   box = ST_Envelope(geom). Row triggers keep it so on INSERT, on an UPDATE of id, geom or
--   kategorie, and on DELETE; a TRUNCATE empties it. They run in the writer's transaction, so a list
--   never sees one without the other.
-- - The box only preselects: the list still tests each candidate's geometry (ST_Intersects) before it
--   is on a page, so a feature whose box meets the bbox but whose geometry does not is never listed.
-- - The functions run as their owner (SECURITY DEFINER, search_path pinned, as migration 020 asks of
--   every function a feature write fires): GeoServer writes features but has no right on this table.
-- - A load with the user triggers disabled (bench/million.ts) fills this table itself.

CREATE TABLE features.list_keys (
  id text NOT NULL,
  kategorie text NOT NULL,
  box geometry NOT NULL,
  CONSTRAINT list_keys_pkey PRIMARY KEY (id) INCLUDE (kategorie, box)
);
-- For a box holding few features: find them by place, then sort their ids.
CREATE INDEX list_keys_box_idx ON features.list_keys USING gist (box);

COMMENT ON TABLE features.list_keys IS 'Id, kategorie and bounding box of every feature, kept by triggers: the list pages through these by index before it reads a feature.';

CREATE FUNCTION features.keep_list_key() RETURNS trigger
  LANGUAGE plpgsql
  AS $$
BEGIN
  IF TG_OP = 'DELETE' OR (TG_OP = 'UPDATE' AND NEW.id IS DISTINCT FROM OLD.id) THEN
    DELETE FROM features.list_keys WHERE id = OLD.id;
  END IF;
  IF TG_OP IN ('INSERT', 'UPDATE') THEN
    INSERT INTO features.list_keys (id, kategorie, box)
    VALUES (NEW.id, NEW.kategorie, ST_Envelope(NEW.geom))
    ON CONFLICT (id) DO UPDATE SET kategorie = EXCLUDED.kategorie, box = EXCLUDED.box;
  END IF;
  RETURN NULL;
END
$$;

CREATE FUNCTION features.clear_list_keys() RETURNS trigger
  LANGUAGE plpgsql
  AS $$
BEGIN
  TRUNCATE features.list_keys;
  RETURN NULL;
END
$$;

DO $$
DECLARE
  postgis_schema name := (SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'postgis');
  fn regprocedure;
BEGIN
  FOREACH fn IN ARRAY ARRAY['features.keep_list_key()'::regprocedure, 'features.clear_list_keys()'::regprocedure] LOOP
    EXECUTE format('ALTER FUNCTION %s SECURITY DEFINER SET search_path = pg_catalog, %I, pg_temp', fn, coalesce(postgis_schema, 'public'));
  END LOOP;
END
$$;

CREATE TRIGGER features_keep_list_key
  AFTER INSERT OR UPDATE OF id, geom, kategorie OR DELETE ON features.features
  FOR EACH ROW EXECUTE FUNCTION features.keep_list_key();

CREATE TRIGGER features_clear_list_keys
  AFTER TRUNCATE ON features.features
  FOR EACH STATEMENT EXECUTE FUNCTION features.clear_list_keys();

INSERT INTO features.list_keys (id, kategorie, box)
  SELECT id, kategorie, ST_Envelope(geom) FROM features.features;
ANALYZE features.list_keys;
