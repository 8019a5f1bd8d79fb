-- 013: GeoServer WFS-T writes name the platform user, not the role `geoserver`.
--
-- The proxy authenticates a WFS-T write with the API (GET /api/auth/forward) and hands GeoServer the
-- user as X-Geodata-User = 'u_' || the 32 hex digits of the identity id. GeoServer's PostGIS store runs
-- its "Session startup SQL" `SET geodata.gs_user = ${GSUSER,anonymous}` on every connection it takes
-- from the pool and `RESET geodata.gs_user` when it returns it (infra/geoserver/provision.ts).
--
-- Whom the history believes:
-- - sessions of the database role geoserver: only geodata.gs_user, and only in the exact shape the proxy
--   produces (anything else, e.g. GeoServer's own admin or 'anonymous', is recorded as 'geoserver').
--   app.actor is ignored for this role, so GeoServer cannot be made to claim an arbitrary name.
-- - every other role (the API): app.actor as before, set per transaction; geodata.gs_user is ignored,
--   so a writer that is not GeoServer cannot borrow GeoServer's setting.

CREATE OR REPLACE FUNCTION features.current_actor() RETURNS text
  LANGUAGE sql STABLE
  AS $$
  SELECT CASE
    WHEN session_user::text = 'geoserver' THEN
      coalesce(
        (SELECT regexp_replace(substr(u, 3), '^(.{8})(.{4})(.{4})(.{4})(.{12})$', '\1-\2-\3-\4-\5')
           FROM (SELECT current_setting('geodata.gs_user', true) AS u) AS s
          WHERE u ~ '^u_[0-9a-f]{32}$'),
        'geoserver')
    ELSE coalesce(nullif(current_setting('app.actor', true), ''), session_user::text)
  END
  $$;

COMMENT ON FUNCTION features.current_actor() IS 'The history actor: app.actor (API), or for the geoserver role the WFS-T user GeoServer set in geodata.gs_user.';
