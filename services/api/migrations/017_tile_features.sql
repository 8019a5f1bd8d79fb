-- 017: what a vector tile holds of each feature (the geometry in Web Mercator, EPSG:3857, and the
-- properties id, kategorie, status, name), kept ready in features.tile_features.
--
-- Why: a tile projected every feature it holds on every request, and PostGIS' ST_Transform costs
-- about 25 µs a call whatever the geometry's size (PROJ's per-call overhead): half the cost of a
-- tile of small features. Projecting once per write moves that cost out of every read, and a tile
-- reads one narrow table (no join back to features.features, whose rows also carry the GeoJSON).
--
-- Invariants, for every writer (the API, GeoServer WFS-T, psql):
-- - features.tile_features holds exactly one row per feature, with
--   geom = features.web_mercator(features.features.geom) and the same id, kategorie, status, name.
--   Row triggers keep it so on INSERT, on an UPDATE of any of those columns, and on DELETE; a
--   TRUNCATE empties it. They run in the writer's transaction, so a tile never sees one without
--   the other. (A later migration that writes features.features with triggers disabled must
--   refresh this table too.)
-- - Tiles read only this table, so the visibility rule of tiles (tiles/queries.ts
--   visibleFeatures(), today "everything") may only use its columns; a rule needing another column
--   adds it here.
-- - It is a side table, not a column of features.features: history snapshots (to_jsonb of the
--   row), GeoServer's published feature type and the public view stay as they were.
-- - Latitudes beyond Web Mercator's ±85.0511° are clipped off before projecting (they have no
--   Web Mercator coordinates); a feature entirely beyond them keeps an empty geometry, which no
--   tile meets.

CREATE FUNCTION features.web_mercator(g geometry) RETURNS geometry
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  AS $$
    SELECT ST_Transform(
      CASE WHEN ST_YMin(g) >= -85.0511287798066 AND ST_YMax(g) <= 85.0511287798066 THEN g
           ELSE ST_ClipByBox2D(g, ST_MakeEnvelope(-180, -85.0511287798066, 180, 85.0511287798066, 4326)) END,
      3857)
  $$;

CREATE TABLE features.tile_features (
  id text PRIMARY KEY,
  geom geometry NOT NULL,
  kategorie text,
  status text,
  name text
);
CREATE INDEX tile_features_geom_idx ON features.tile_features USING gist (geom);

CREATE FUNCTION features.keep_tile_feature() RETURNS trigger
  LANGUAGE plpgsql
  AS $$
BEGIN
  IF TG_OP IN ('DELETE', 'UPDATE') AND (TG_OP = 'DELETE' OR NEW.id IS DISTINCT FROM OLD.id) THEN
    DELETE FROM features.tile_features WHERE id = OLD.id;
  END IF;
  IF TG_OP IN ('INSERT', 'UPDATE') THEN
    INSERT INTO features.tile_features (id, geom, kategorie, status, name)
    VALUES (NEW.id, features.web_mercator(NEW.geom), NEW.kategorie, NEW.status, NEW.name)
    ON CONFLICT (id) DO UPDATE SET geom = EXCLUDED.geom, kategorie = EXCLUDED.kategorie, status = EXCLUDED.status, name = EXCLUDED.name;
  END IF;
  RETURN NULL;
END
$$;

CREATE TRIGGER features_keep_tile_feature
  AFTER INSERT OR UPDATE OF id, geom, kategorie, status, name OR DELETE ON features.features
  FOR EACH ROW EXECUTE FUNCTION features.keep_tile_feature();

CREATE FUNCTION features.clear_tile_features() RETURNS trigger
  LANGUAGE plpgsql
  AS $$
BEGIN
  TRUNCATE features.tile_features;
  RETURN NULL;
END
$$;

CREATE TRIGGER features_clear_tile_features
  AFTER TRUNCATE ON features.features
  FOR EACH STATEMENT EXECUTE FUNCTION features.clear_tile_features();

INSERT INTO features.tile_features (id, geom, kategorie, status, name)
  SELECT id, features.web_mercator(geom), kategorie, status, name FROM features.features;
ANALYZE features.tile_features;
