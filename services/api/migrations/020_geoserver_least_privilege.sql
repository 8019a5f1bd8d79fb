-- 020: GeoServer's database role writes feature rows and nothing else (issue 25).
--
-- Before: the roles job (infra/jobs/features-db-roles.sh) gave `geoserver` SELECT, INSERT, UPDATE and
-- DELETE on every table `features` created (default privileges), so whoever held GeoServer's store
-- credentials could rewrite users.users (roles), qc.* (approvals, claims, the export outbox), the job
-- queue (graphile_worker), metadata.schema_migrations and the history itself.
--
-- Now:
-- - geoserver: USAGE on the schema features; SELECT, INSERT, UPDATE and DELETE on features.features
--   (the WFS-T layer) and SELECT on features.public_features (the anonymous layer). Nothing else. The
--   roles job sets no default privileges any more, so a table a later migration creates is not
--   GeoServer's unless that migration grants it.
-- - What a feature write implies elsewhere is written by triggers that run as their owner (SECURITY
--   DEFINER): the history row, the QC 'reopen' transition of an edited approved feature, the end of a
--   claim, the tile layer's row. GeoServer cannot write those tables directly, so it can neither
--   forge a history row nor approve anything. The actor stays the writer's: features.current_actor()
--   reads session_user, which SECURITY DEFINER leaves alone.
-- - Each of these functions pins its search_path (pg_catalog, PostGIS's schema, pg_temp last). A later
--   CREATE OR REPLACE of one of them must repeat SECURITY DEFINER and the SET, because CREATE OR
--   REPLACE resets both; services/api/test/geoserver-role.test.ts fails otherwise.
-- - Without a role named geoserver (the embedded database, a development server) only the functions
--   change. The migration runs as the schemas' owner (`features` in the stack), the one that granted.

DO $$
DECLARE
  postgis_schema name := (SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'postgis');
  fn regprocedure;
BEGIN
  FOREACH fn IN ARRAY ARRAY[
    'history.record_feature_version()'::regprocedure,
    'qc.reopen_on_edit()'::regprocedure,
    'qc.end_claim()'::regprocedure,
    'features.keep_tile_feature()'::regprocedure,
    'features.clear_tile_features()'::regprocedure
  ] LOOP
    EXECUTE format('ALTER FUNCTION %s SECURITY DEFINER SET search_path = pg_catalog, %I, pg_temp', fn, coalesce(postgis_schema, 'public'));
  END LOOP;
END
$$;

DO $$
DECLARE
  s name;
BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'geoserver') THEN
    RETURN;
  END IF;
  -- The former blanket grants, in every schema of the application this role owns (not PostgreSQL's,
  -- not PostGIS's): tables, views, sequences and the schemas themselves.
  FOR s IN
    SELECT nspname FROM pg_namespace
     WHERE nspowner = current_user::regrole
       AND nspname NOT LIKE 'pg\_%' AND nspname NOT IN ('information_schema', 'public', 'tiger', 'tiger_data', 'topology')
  LOOP
    EXECUTE format('REVOKE ALL ON ALL TABLES IN SCHEMA %I FROM geoserver', s);
    EXECUTE format('REVOKE ALL ON ALL SEQUENCES IN SCHEMA %I FROM geoserver', s);
    EXECUTE format('REVOKE ALL ON SCHEMA %I FROM geoserver', s);
  END LOOP;
  ALTER DEFAULT PRIVILEGES REVOKE ALL ON TABLES FROM geoserver;
  ALTER DEFAULT PRIVILEGES REVOKE ALL ON SEQUENCES FROM geoserver;
  ALTER DEFAULT PRIVILEGES REVOKE ALL ON SCHEMAS FROM geoserver;

  GRANT USAGE ON SCHEMA features TO geoserver;
  GRANT SELECT, INSERT, UPDATE, DELETE ON features.features TO geoserver;
  GRANT SELECT ON features.public_features TO geoserver;
END
$$;
