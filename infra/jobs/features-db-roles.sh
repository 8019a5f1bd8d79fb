#!/bin/sh
# Ensures the roles of the features database; run by the features-db-roles job on every `pulumi up`
# whose inputs changed, so it is idempotent and a rotated password takes effect on the next run.
#
#   features   owns the database; the API connects and migrates as this role.
#   geoserver  reads and writes feature rows (WMS, WFS-T) but owns nothing and cannot change the schema.
#
# Connection: PGHOST, PGPORT, PGUSER (superuser), PGPASSWORD, PGDATABASE from the environment.
# Passwords:  FEATURES_DB_PASSWORD, GEOSERVER_DB_PASSWORD. Exit codes: 0 ok, 1 failure.
set -eu

: "${FEATURES_DB_PASSWORD:?FEATURES_DB_PASSWORD is required}"
: "${GEOSERVER_DB_PASSWORD:?GEOSERVER_DB_PASSWORD is required}"

psql -v ON_ERROR_STOP=1 --no-psqlrc --quiet \
  -v features_password="$FEATURES_DB_PASSWORD" \
  -v geoserver_password="$GEOSERVER_DB_PASSWORD" \
  -v database="$PGDATABASE" <<'SQL'
SELECT 'CREATE ROLE features LOGIN' WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'features') \gexec
SELECT 'CREATE ROLE geoserver LOGIN' WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'geoserver') \gexec
ALTER ROLE features WITH LOGIN NOSUPERUSER NOCREATEROLE PASSWORD :'features_password';
ALTER ROLE geoserver WITH LOGIN NOSUPERUSER NOCREATEROLE NOCREATEDB PASSWORD :'geoserver_password';
ALTER DATABASE :"database" OWNER TO features;
REVOKE ALL ON DATABASE :"database" FROM PUBLIC;
GRANT CONNECT ON DATABASE :"database" TO geoserver;
-- Whatever the API's migrations create later (schemas features, history, qc, ...) is usable by GeoServer:
-- rows yes, DDL no. The history trigger runs as the writing role, hence write access to all tables.
ALTER DEFAULT PRIVILEGES FOR ROLE features GRANT USAGE ON SCHEMAS TO geoserver;
ALTER DEFAULT PRIVILEGES FOR ROLE features GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO geoserver;
ALTER DEFAULT PRIVILEGES FOR ROLE features GRANT USAGE, SELECT ON SEQUENCES TO geoserver;
-- And for schemas that already exist (a database restored from a backup, or an older stack).
SELECT format('GRANT USAGE ON SCHEMA %I TO geoserver', nspname) FROM pg_namespace
  WHERE nspowner = 'features'::regrole \gexec
SELECT format('GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA %I TO geoserver', nspname) FROM pg_namespace
  WHERE nspowner = 'features'::regrole \gexec
SELECT format('GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA %I TO geoserver', nspname) FROM pg_namespace
  WHERE nspowner = 'features'::regrole \gexec
SQL
echo "features-db roles ensured"
