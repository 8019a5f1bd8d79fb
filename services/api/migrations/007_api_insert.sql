-- 007: creating a feature in one statement.
--
-- Why: a POST used five round trips (BEGIN, set_config, ST_IsValid, INSERT, COMMIT). As one
-- statement it runs in the implicit transaction of that statement: the actor setting, the topology
-- check and the insert (with its history row) commit together or not at all, in one round trip.
--
-- The geometry is stored as the API serves it (RFC 7946 winding; the API rounds coordinates to 9
-- decimals before it calls this). A geometry PostGIS finds invalid raises SQLSTATE GF001 with
-- ST_IsValidReason as the message; the API turns that into a 400 naming the geometry.

CREATE FUNCTION features.api_insert(
  p_actor text, p_id text, p_name text, p_kategorie text, p_adresse text, p_telefon text, p_geometry text
) RETURNS TABLE (new_id text, new_version integer, new_geojson text)
  LANGUAGE plpgsql
  AS $$
DECLARE
  g geometry;
BEGIN
  IF p_actor IS NOT NULL THEN
    PERFORM set_config('app.actor', p_actor, true);
  END IF;
  g := ST_SetSRID(ST_GeomFromGeoJSON(p_geometry), 4326);
  IF NOT ST_IsValid(g) THEN
    RAISE EXCEPTION USING ERRCODE = 'GF001', MESSAGE = ST_IsValidReason(g);
  END IF;
  RETURN QUERY
    INSERT INTO features.features AS f (id, name, kategorie, adresse, telefon, geom, created_by)
    VALUES (coalesce(p_id, gen_random_uuid()::text), p_name, p_kategorie, p_adresse, p_telefon, features.rfc7946_winding(g), p_actor)
    RETURNING f.id, f.version, f.geojson;
END
$$;
