-- 018: a stamp on every row of features.tile_features (migration 017), changed by every write to the
-- row, so the API can tell cheaply whether a cached vector tile is still current.
--
-- Why: building a dense tile costs about a second in PostGIS (ST_AsMVTGeom + ST_AsMVT over tens of
-- thousands of features); reading the stamps of the rows a tile meets costs a few milliseconds
-- (services/api/src/tiles/queries.ts fingerprintQuery). The API keeps built tiles in memory keyed by
-- the tile's fingerprint — count, sum and XOR of the stamps of the visible rows whose geometry meets
-- the tile with its buffer — and serves the stored bytes while the fingerprint is unchanged.
--
-- Invariants, for every writer (the API, GeoServer WFS-T, psql), because they hold in the database:
-- - Every INSERT into and every UPDATE of features.tile_features (only 017's triggers write it) sets
--   a fresh stamp, in the writer's transaction: a row version that a tile could show differently
--   (geometry, id, kategorie, status, name) never keeps its old stamp.
-- - The stamp is a 64-bit hash of a sequence value, not the sequence value itself. Sequence values
--   are handed out in call order, not commit order, so neither max(stamp) nor a sum of raw values
--   identifies a set of rows (a transaction holding an older value can commit after a newer one,
--   and sums of small consecutive integers coincide easily). Hashed, the stamps behave as random
--   64-bit numbers: the fingerprint is a function of the set of row versions a snapshot sees,
--   whatever order they committed in, and two different sets share count, sum and XOR with odds of
--   about 2^-64. A delete shows as a smaller count or a different sum; a feature moving out of
--   a tile leaves the set; one moving in joins it.
-- - TRUNCATE (017 empties the table with features.features) leaves no row and no stamp; rows written
--   afterwards get new ones.
CREATE SEQUENCE features.tile_feature_stamp AS bigint;

CREATE FUNCTION features.stamp_tile_feature() RETURNS trigger
  LANGUAGE plpgsql
  AS $$
BEGIN
  NEW.stamp := hashint8extended(nextval('features.tile_feature_stamp'), 0);
  RETURN NEW;
END
$$;

ALTER TABLE features.tile_features ADD COLUMN stamp bigint;

CREATE TRIGGER tile_features_stamp
  BEFORE INSERT OR UPDATE ON features.tile_features
  FOR EACH ROW EXECUTE FUNCTION features.stamp_tile_feature();

-- The rows 017 filled: the trigger stamps each.
UPDATE features.tile_features SET stamp = 0;
ALTER TABLE features.tile_features ALTER COLUMN stamp SET NOT NULL;
ANALYZE features.tile_features;
