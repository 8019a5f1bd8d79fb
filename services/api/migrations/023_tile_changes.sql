-- 023: every change to features.features records the area it changed (features.tile_changes) and
-- tells every listening API process (NOTIFY tile_changes), so a cached vector tile is dropped exactly
-- when a change meets it and a cache hit needs no query (services/api/src/tiles/changes.ts).
--
-- Why: the tile cache used to ask the database on every request for the fingerprint of the rows a tile
-- meets (migration 018): a z10 hit cost 5 → 22 → 154 ms at 10k → 100k → 1M features, a scan that
-- grows with the data. Now a write pays a few boxes and one notification, and a hit pays nothing.
--
-- Invariants, for every writer (the API, GeoServer WFS-T, psql, imports), because they hold in the
-- database:
-- - Each INSERT, UPDATE, DELETE or TRUNCATE statement on features.features adds, in the writer's
--   transaction, rows to features.tile_changes whose boxes (EPSG:3857, as features.tile_features)
--   together cover the bounding boxes of every old and new geometry the statement touched: the
--   features grouped by a grid of 0.02° cells, one box per cell (a 10 000-feature import is a few
--   hundred rows, not 10 000). A TRUNCATE covers the whole world. An UPDATE counts whatever column it
--   changed: comparing old and new rows costs more than the tiles a needless drop rebuilds.
-- - Each row carries its writer's transaction id (xid). Whether a change is in a tile is a question
--   of snapshots, not of sequence numbers: a sequence hands out values in call order but
--   transactions commit in another, so "seq > the tile's" would miss a transaction that took an
--   older value and committed later (the reason 018 hashes its stamps). A tile built under snapshot S
--   is current while no row whose xid is not visible in S (pg_visible_in_snapshot) has a box meeting
--   the tile — an index lookup (tile_changes_xid_idx, tile_changes_box_idx), whatever the data's size.
-- - The same statement sends pg_notify('tile_changes', {"seq": …, "boxes": [[x0, y0, x1, y1], …]}):
--   the boxes rounded outwards to whole metres and merged on coarser grids until at most 40 remain
--   (about 2 KB, far below NOTIFY's 8000 bytes). PostgreSQL delivers it at commit, in commit order,
--   and never for a rolled-back write. `seq` is the statement's last features.tile_changes.seq, for
--   diagnostics only.
-- - features.prune_tile_changes(keep) deletes rows older than `keep` and moves
--   features.tile_changes_horizon up to the largest xid it deleted: a snapshot whose xmin is not
--   above the horizon can no longer be checked against the rows, and its tile is rebuilt instead.
-- - Writes with the user triggers disabled (a bulk load, bench/million.ts) record nothing: whoever
--   does that on a database an API serves must add a whole-world row (or restart the APIs).

CREATE TABLE features.tile_changes (
  seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
  box geometry NOT NULL,
  changed_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX tile_changes_xid_idx ON features.tile_changes (xid);
CREATE INDEX tile_changes_box_idx ON features.tile_changes USING gist (box);

CREATE TABLE features.tile_changes_horizon (
  only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
  -- The largest xid whose rows may have been pruned; nothing older than this migration was recorded.
  xid xid8 NOT NULL
);
INSERT INTO features.tile_changes_horizon (xid) VALUES (pg_current_xact_id());

CREATE FUNCTION features.record_tile_changes() RETURNS trigger
  LANGUAGE plpgsql
  AS $$
DECLARE
  extents box2d[];
  boxes geometry[];
  last_seq bigint;
  payload json;
  -- The payload's merge grid, in metres (EPSG:3857).
  cell float8 := 2446;
BEGIN
  -- The bounding boxes of the touched geometries, merged per 0.02° cell (about 2 km), in EPSG:4326:
  -- read from each geometry's stored box, projected once per cell below. Transition tables are named
  -- per event, so each event reads its own.
  IF TG_OP = 'INSERT' THEN
    SELECT array_agg(e) INTO extents FROM (
      SELECT ST_Extent(g) AS e FROM (SELECT geom AS g FROM new_rows) r
      WHERE NOT ST_IsEmpty(g) GROUP BY floor(ST_XMin(g) / 0.02), floor(ST_YMin(g) / 0.02)) c;
  ELSIF TG_OP = 'UPDATE' THEN
    SELECT array_agg(e) INTO extents FROM (
      SELECT ST_Extent(g) AS e FROM (SELECT geom AS g FROM old_rows UNION ALL SELECT geom FROM new_rows) r
      WHERE NOT ST_IsEmpty(g) GROUP BY floor(ST_XMin(g) / 0.02), floor(ST_YMin(g) / 0.02)) c;
  ELSIF TG_OP = 'DELETE' THEN
    SELECT array_agg(e) INTO extents FROM (
      SELECT ST_Extent(g) AS e FROM (SELECT geom AS g FROM old_rows) r
      WHERE NOT ST_IsEmpty(g) GROUP BY floor(ST_XMin(g) / 0.02), floor(ST_YMin(g) / 0.02)) c;
  ELSE -- TRUNCATE
    extents := ARRAY[ST_MakeBox2D(ST_MakePoint(-180, -90), ST_MakePoint(180, 90))];
  END IF;
  IF extents IS NULL THEN
    RETURN NULL; -- no row, or only empty geometries
  END IF;

  -- In Web Mercator, as the tiles: x depends on the longitude only and y on the latitude only, both
  -- monotonically, so the projected corners of a box are the corners of the projected box.
  -- features.web_mercator clips latitudes beyond ±85.05° first; a box entirely beyond them meets no tile.
  WITH projected AS (
    SELECT features.web_mercator(ST_SetSRID(e::geometry, 4326)) AS box FROM unnest(extents) e
  ), recorded AS (
    INSERT INTO features.tile_changes (box)
    SELECT box FROM projected WHERE box IS NOT NULL AND NOT ST_IsEmpty(box)
    RETURNING seq, box
  )
  SELECT max(seq), array_agg(box) INTO last_seq, boxes FROM recorded;
  IF boxes IS NULL THEN
    RETURN NULL;
  END IF;

  -- The payload: the boxes merged per grid cell, the cell quadrupled until at most 40 remain (after
  -- eight rounds a cell is wider than the world).
  WHILE cardinality(boxes) > 40 LOOP
    boxes := ARRAY(
      SELECT ST_MakeEnvelope(min(ST_XMin(b)), min(ST_YMin(b)), max(ST_XMax(b)), max(ST_YMax(b)), 3857)
      FROM unnest(boxes) b
      GROUP BY floor(ST_XMin(b) / cell), floor(ST_YMin(b) / cell));
    cell := cell * 4;
  END LOOP;
  SELECT json_agg(json_build_array(floor(ST_XMin(b)), floor(ST_YMin(b)), ceil(ST_XMax(b)), ceil(ST_YMax(b)))) INTO payload
  FROM unnest(boxes) b;
  PERFORM pg_notify('tile_changes', json_build_object('seq', last_seq, 'boxes', payload)::text);
  RETURN NULL;
END
$$;

CREATE TRIGGER features_record_tile_changes_insert
  AFTER INSERT ON features.features REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION features.record_tile_changes();
CREATE TRIGGER features_record_tile_changes_update
  AFTER UPDATE ON features.features REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION features.record_tile_changes();
CREATE TRIGGER features_record_tile_changes_delete
  AFTER DELETE ON features.features REFERENCING OLD TABLE AS old_rows
  FOR EACH STATEMENT EXECUTE FUNCTION features.record_tile_changes();
CREATE TRIGGER features_record_tile_changes_truncate
  AFTER TRUNCATE ON features.features
  FOR EACH STATEMENT EXECUTE FUNCTION features.record_tile_changes();

-- As the other trigger functions on features.features (migration 020): it runs as its owner, so
-- GeoServer's role, which may write feature rows only, records its changes without rights on this
-- table; the search path is pinned (a later CREATE OR REPLACE must repeat both).
DO $$
BEGIN
  EXECUTE format('ALTER FUNCTION features.record_tile_changes() SECURITY DEFINER SET search_path = pg_catalog, %I, pg_temp',
    coalesce((SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'postgis'), 'public'));
END
$$;

-- Deletes the changes older than `keep` and returns how many; one pruner at a time (another call
-- meanwhile returns 0 at once). Every API process calls it now and then (tiles/changes.ts).
CREATE FUNCTION features.prune_tile_changes(keep interval) RETURNS integer
  LANGUAGE plpgsql
  AS $$
DECLARE
  removed integer;
  newest xid8;
BEGIN
  IF NOT pg_try_advisory_xact_lock(7346120917) THEN
    RETURN 0;
  END IF;
  WITH gone AS (DELETE FROM features.tile_changes WHERE changed_at < now() - keep RETURNING xid)
  SELECT count(*), max(xid) INTO removed, newest FROM gone;
  IF newest IS NOT NULL THEN
    UPDATE features.tile_changes_horizon SET xid = greatest(xid, newest);
  END IF;
  RETURN removed;
END
$$;
