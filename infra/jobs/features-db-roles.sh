#!/bin/sh
# Ensures the roles of the features database; run by the features-db-roles job on every `pulumi up`
# whose inputs changed, so it is idempotent and a rotated password takes effect on the next run.
#
#   features   owns the database; the API connects and migrates as this role.
#   geoserver  reads and writes feature rows (WMS, WFS-T) but owns nothing and cannot change the schema;
#              which tables it may touch is the migrations' business (services/api/migrations/020_*).
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
-- GeoServer's rights on tables are granted by the API's migrations, which run after this job, when the
-- tables exist (migration 020: features.features and the public view, nothing else). No default
-- privileges: a table created later is not GeoServer's unless a migration grants it. Earlier versions
-- of this job set blanket ones (every table `features` creates, writable by GeoServer); they are
-- removed here, and migration 020 revokes what they granted.
ALTER DEFAULT PRIVILEGES FOR ROLE features REVOKE ALL ON TABLES FROM geoserver;
ALTER DEFAULT PRIVILEGES FOR ROLE features REVOKE ALL ON SEQUENCES FROM geoserver;
ALTER DEFAULT PRIVILEGES FOR ROLE features REVOKE ALL ON SCHEMAS FROM geoserver;
SQL
echo "features-db roles ensured"
